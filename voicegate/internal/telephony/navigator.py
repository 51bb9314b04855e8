"""Through a phone menu toward a goal: what to do after each prompt, and when to stop.

`MenuNavigator` is the policy, pure: it is told each whole prompt the menu spoke (`heard`) and how long
the line has been quiet since (`quiet`), and answers with a step: press a key, say a word, wait, hand
the call over to the conversation (a person answered), or stop with a reason. The live call's side
(listening, timing, keys out) is navigation.py; the prompt's words are read by menu.py and the option
toward the goal chosen by menu_choice.py.

The rules, in the order a call meets them:
- a menu with an option toward the goal: choose it (a key, or the word when the menu asks to "say" it);
  the same menu back again after we chose in it means the choice did not take: choose once more, then stop;
- a menu with nothing toward the goal: wait for it to go on or repeat; repeated with still nothing, try
  the way to a person once (its "operator"/"agent" option, else key 0, or "agent" on a spoken menu),
  and stop the next time it comes back;
- "that is not a valid option" twice, "we are closed", "goodbye": a dead end, with the menu's words;
- a voicemail greeting (amd.py's phrases): stop, it is a machine, not a menu;
- hold messages and music: wait (navigation.py bounds the whole walk by time);
- a prompt in another language ("Para ventas, oprima uno ..."): wait, saying so; it is not read as the
  menu's English options, nor counted as a hearing of the menu before it;
- a menu heard again with no choice of ours between: read from both hearings (menu.py `merge_hearings`),
  so an option or label one hearing lost is still there for the choice and the way to a person;
- a person ("Billing, this is Dana, how can I help?"), anyone who says something that is not a menu
  right after a hold message, or anyone who says something that is not a menu and then waits
  `person_wait_ms` in silence: hand over.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from voicegate.internal.telephony.menu import (
    MenuOption,
    PromptKind,
    classify_prompt,
    menu_signature,
    merge_hearings,
    other_language,
    parse_menu,
)
from voicegate.internal.telephony.menu_choice import FALLBACK_KEY, FALLBACK_WORD, GoalMatcher, operator_option

# Two hearings whose keys overlap this much (shared / all) are one menu: the recogniser drops or garbles an
# option now and then ("press 3" lost in a merged sentence), and a menu that only shares "0" with another
# (1, 2, 0 vs 4, 5, 0: 1/5) is a different one.
SAME_MENU_OVERLAP = 0.5

NavigationResult = Literal["reached", "dead_end", "voicemail", "hung_up"]


@dataclass(frozen=True, slots=True)
class NavigationSettings:
    # Quiet after speech that ends a prompt: menus pause between options for well under a second, and
    # wait several seconds for a key after the last one.
    prompt_end_ms: int = 1500
    # Something that is no menu, then this much silence: a person, waiting for us to speak (amd.py's
    # end-of-greeting rule, with room for a menu's pause before its options).
    person_wait_ms: int = 2500
    # Nothing at all heard (no speech, no music) this long after the answer or our last choice: a dead line.
    dead_air_ms: int = 20000
    # "Not a valid option" this many times: the menu will not take what we press.
    max_invalid: int = 2
    # The same menu after we chose in it this many times: the choice does not take.
    max_choices_per_menu: int = 2
    # Keys pressed or words said in all: deeper than any sane menu tree, short of a loop.
    max_steps: int = 8


@dataclass(frozen=True, slots=True)
class Press:
    key: str
    label: str
    kind: Literal["press"] = "press"


@dataclass(frozen=True, slots=True)
class Say:
    word: str
    label: str
    kind: Literal["say"] = "say"


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str
    kind: Literal["wait"] = "wait"


@dataclass(frozen=True, slots=True)
class HandOver:
    reason: str
    heard: str  # what the person said
    kind: Literal["hand_over"] = "hand_over"


@dataclass(frozen=True, slots=True)
class Stop:
    result: NavigationResult
    reason: str
    kind: Literal["stop"] = "stop"


Step = Press | Say | Wait | HandOver | Stop


class MenuNavigator:
    def __init__(self, matcher: GoalMatcher, settings: NavigationSettings | None = None) -> None:
        self.matcher = matcher
        self.settings = settings or NavigationSettings()
        self.steps: list[Press | Say] = []
        self.last_kind: PromptKind | None = None
        self._last_text = ""
        self._hearings: Counter[frozenset[str]] = Counter()
        self._chosen_in: Counter[frozenset[str]] = Counter()
        self._invalid = 0
        self._fallback_used = False
        self._last_menu: frozenset[str] | None = None
        self._last_options: list[MenuOption] = []  # the last menu's, from all its hearings since our last choice

    def heard(self, text: str) -> Step:
        """A whole prompt (speech up to a pause) and what to do about it."""
        kind = classify_prompt(text)
        held = self.last_kind == "hold"
        self.last_kind, self._last_text = kind, text.strip()
        quoted = f"'{self._last_text}'"
        if kind in ("menu", "garbled_menu"):
            return self._menu(text)
        if kind == "foreign":
            return Wait(f"a prompt in another language ({other_language(text)}): not read as a menu")
        if kind == "closed":
            return Stop("dead_end", f"the menu ended: {quoted}")
        if kind == "invalid":
            self._invalid += 1
            if self._invalid >= self.settings.max_invalid:
                return Stop("dead_end", f"the menu refused our choice {self._invalid} times: {quoted}")
            return Wait("the menu refused the choice")
        if kind == "voicemail":
            return Stop("voicemail", f"an answering machine, not a menu: {quoted}")
        if kind == "person":
            return HandOver("a person answered", self._last_text)
        if kind == "hold":
            return Wait("on hold")
        if kind == "unclear" and held:
            # Whoever speaks right after the queue's message is the person it queued us for, though their
            # greeting came through garbled ("How can I tell?"): they will not wait for our silence.
            return HandOver("someone spoke after the hold", self._last_text)
        if kind == "unclear":
            return Wait("not a menu: waiting to see whether someone waits for us")
        return Wait("no speech")

    def quiet(self, silent_ms: int) -> Step | None:
        """Time has passed: `silent_ms` without a sound (speech or music) since the last prompt ended or our
        last choice. None: nothing to do yet."""
        if self.last_kind == "unclear" and silent_ms >= self.settings.person_wait_ms:
            return HandOver("someone spoke and waited for an answer", self._last_text)
        if silent_ms >= self.settings.dead_air_ms:
            return Stop("dead_end", f"nothing on the line for {silent_ms // 1000} s")
        return None

    def options_for(self, text: str) -> tuple[frozenset[str], list[MenuOption]]:
        """The menu a prompt is (its signature) and the options to choose among: the prompt's own, merged
        with the hearings before it when it is the same menu again with nothing chosen since. Changes
        nothing (a chooser that asks about a prompt before `heard` may ask about these)."""
        options = parse_menu(text)
        signature = self._known(menu_signature(options))
        if signature == self._last_menu:  # the same menu again, nothing chosen since: one menu, two hearings
            options = merge_hearings(self._last_options, options)
        return signature, options

    def _menu(self, text: str) -> Step:
        signature, options = self.options_for(text)
        self._hearings[signature] += 1
        self._last_menu, self._last_options = signature, options
        choice = self.matcher.choose(options)
        if choice is not None:
            if self._chosen_in[signature] >= self.settings.max_choices_per_menu:
                return Stop("dead_end", f"the menu came back after {choice.option.action} "
                            f"({choice.option.label}) {self._chosen_in[signature]} times")
            self._chosen_in[signature] += 1
            option = choice.option
            return self._act(Press(option.key, option.label) if option.key else Say(option.word, option.label))
        if self._hearings[signature] < 2:
            return Wait("no option toward the goal yet")
        labels = ", ".join(option.label or option.word for option in options)
        if self._fallback_used:
            return Stop("dead_end", f"no option toward '{self.matcher.goal}' (heard: {labels})")
        self._fallback_used = True
        way_out = operator_option(options)
        if way_out is not None:
            return self._act(Press(way_out.key, way_out.label) if way_out.key else Say(way_out.word, way_out.label))
        if not options or any(option.key for option in options):  # a misheard menu still spoke of keys
            return self._act(Press(FALLBACK_KEY, "operator"))
        return self._act(Say(FALLBACK_WORD, "operator"))

    def _known(self, signature: frozenset[str]) -> frozenset[str]:
        """The menu heard before that this one is, misheard a little (a key missed or added), else itself.
        A menu whose options were all misheard (no keys at all) is taken for the last one heard, unless we
        chose since (then it may be the next menu's)."""
        if not signature and self._last_menu is not None:
            return self._last_menu
        for earlier in self._hearings:
            if signature == earlier or (signature and earlier and
                                        len(signature & earlier) / len(signature | earlier) >= SAME_MENU_OVERLAP):
                return earlier
        return signature

    def _act(self, step: Press | Say) -> Step:
        if len(self.steps) >= self.settings.max_steps:
            return Stop("dead_end", f"still in the menu after {len(self.steps)} choices")
        self.steps.append(step)
        self._last_menu = None
        return step

    def path(self) -> list[str]:
        """What we chose, in order ("1 billing", "say agent")."""
        return [f"{s.key} {s.label}" if isinstance(s, Press) else f"say {s.word}" for s in self.steps]
