"""A language model chooses the menu's option toward the goal, when the deployer configured one.

The offline matcher (menu_choice.py) knows words and a small embedding; "my suitcase never showed up" ->
"delayed or missing bags" is a question of meaning a chat model answers easily. So with `[menus] chooser`
"model" (or "auto" with `[llm] provider` openai or ollama), each menu prompt is put to the configured
model: the goal, the options as heard (a key or a word, and its label) and what was pressed so far, and
it answers one JSON object: an option (by its key or word), "wait", "operator" or "dead_end". The answer
is bounded (`model_max_tokens`, `model_timeout_ms`); a timeout, an error or an answer that is not one of
those falls back to the offline matcher, and a key or word the menu did not offer is never taken (a
model may invent "press 9"; pressing it would be a guess the menu did not allow).

The live call asks before the navigator decides (navigation.py awaits `ModelGoalMatcher.consider` with
the prompt), and the navigator's `choose` then reads the answer for that prompt's options: the navigator
stays synchronous and pure, and its rules (repeat, operator fallback, dead ends) are unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from voicegate.internal.config import Config
from voicegate.internal.config.providers import OllamaConfig, OpenAIConfig
from voicegate.internal.config.telephony import MenusConfig
from voicegate.internal.telephony.menu import MenuOption, classify_prompt, parse_menu
from voicegate.internal.telephony.menu_choice import Choice, GoalMatcher, SentenceSimilarity, operator_option

log = logging.getLogger(__name__)

Verdict = Literal["option", "wait", "operator", "dead_end", "invalid"]

SYSTEM = (
    "You walk an automated phone menu on behalf of a caller. Given the caller's goal and the options the "
    "menu just offered, pick the option most likely to lead toward the goal, even when it uses other words "
    "(\"my suitcase never arrived\" -> \"missing bags\"). Answer with one JSON object and nothing else: "
    "{\"choice\": \"<the option's key or word>\"} for an option; {\"choice\": \"operator\"} when no option "
    "fits but one leads to a person; {\"choice\": \"wait\"} when the menu may still be going on; "
    "{\"choice\": \"dead_end\"} when no option can serve the goal. Never name a key the menu did not offer. "
    "An insurance, travel or estate agent is a department, not a person."
)


class Completion(Protocol):
    async def __call__(self, system: str, user: str) -> str: ...


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    verdict: Verdict
    option: MenuOption | None = None
    raw: str = ""


def menu_question(goal: str, options: Sequence[MenuOption], pressed: Sequence[str]) -> str:
    """The user message: the goal, the options one a line ("key 2: order a repeat prescription", "say
    billing: billing"), and the path so far."""
    lines = [f"Goal: {goal}", f"Pressed so far: {', '.join(pressed) if pressed else 'nothing'}", "Options:"]
    for option in options:
        how = f"key {option.key}" if option.key else f"say {option.word}"
        lines.append(f"- {how}: {option.label or option.word}")
    lines.append('Answer with JSON only, e.g. {"choice": "2"}.')
    return "\n".join(lines)


def read_answer(text: str, options: Sequence[MenuOption]) -> ModelAnswer:
    """The model's reply as a verdict. Only an option the menu offered counts as one: a key or word that
    is not among `options` is "invalid" (and so is anything that is not the JSON asked for)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        data = json.loads(match.group(0)) if match else None
    except ValueError:
        data = None
    choice = data.get("choice") if isinstance(data, dict) else None
    if isinstance(choice, int):
        choice = str(choice)
    if not isinstance(choice, str) or not choice.strip():
        return ModelAnswer("invalid", raw=text)
    said = choice.strip().lower().removeprefix("key ").removeprefix("press ").removeprefix("say ").strip()
    if said in ("wait", "operator", "dead_end"):
        return ModelAnswer(said, raw=text)  # type: ignore[arg-type]
    for option in options:
        if (option.key and said == option.key.lower()) or (option.word and said == option.word.lower()):
            return ModelAnswer("option", option, raw=text)
    return ModelAnswer("invalid", raw=text)


async def ask(complete: Completion, goal: str, options: Sequence[MenuOption], pressed: Sequence[str],
              timeout_s: float) -> ModelAnswer:
    """The model's verdict on one menu, "invalid" on a timeout or an error (the offline matcher decides)."""
    try:
        async with asyncio.timeout(timeout_s):
            text = await complete(SYSTEM, menu_question(goal, options, pressed))
    except TimeoutError:
        log.warning("menu model timed out", extra={"timeout_s": timeout_s})
        return ModelAnswer("invalid", raw="timeout")
    except Exception as exc:  # any provider failure: the offline matcher still chooses
        log.warning("menu model failed", extra={"error": type(exc).__name__})
        return ModelAnswer("invalid", raw=type(exc).__name__)
    answer = read_answer(text, options)
    if answer.verdict == "invalid":
        log.warning("menu model answer refused", extra={"answer": text[:200]})
    return answer


class ModelGoalMatcher(GoalMatcher):
    """A GoalMatcher whose choice is the model's when it gave a usable answer for these options."""

    def __init__(self, goal: str, complete: Completion, timeout_s: float,
                 similarity: SentenceSimilarity | None = None, *,
                 synonyms: dict[str, list[str]] | None = None) -> None:
        super().__init__(goal, similarity, synonyms=synonyms)
        self._complete = complete
        self._timeout_s = timeout_s
        self._answers: dict[tuple[MenuOption, ...], ModelAnswer] = {}
        self._latest: ModelAnswer | None = None  # the answer on the last prompt considered
        self.asked = 0

    async def consider(self, prompt: str, pressed: Sequence[str],
                       heard: Sequence[MenuOption] | None = None) -> None:
        """Ask the model about the menu in `prompt` (nothing for a prompt that is no menu): about `heard`,
        the options the navigator will choose among (MenuNavigator.options_for), else the prompt's own."""
        if classify_prompt(prompt) not in ("menu", "garbled_menu"):
            return
        options = tuple(heard if heard is not None else parse_menu(prompt))
        if not options:
            self._latest = None
            return
        if options not in self._answers:
            self.asked += 1
            self._answers[options] = await ask(self._complete, self.goal, options, pressed, self._timeout_s)
        self._latest = self._answers[options]

    def choose(self, options: Sequence[MenuOption]) -> Choice | None:
        # The navigator may choose among a menu's two hearings merged (navigator.merge_hearings): the
        # answer on the prompt just considered stands for it, its option looked up among these.
        answer = self._answers.get(tuple(options), self._latest)
        if answer is None or answer.verdict == "invalid":
            return super().choose(options)
        if answer.verdict == "option" and answer.option is not None:
            offered = offered_as(answer.option, options)
            return Choice(offered, 1.0, "model") if offered is not None else super().choose(options)
        # The model sees nothing toward the goal, but an option shares the goal's words, a shipped concept
        # or the deployer's [menus] synonyms: that is the deployer's and the words' say, and it stands.
        offline = super().choose(options)
        if offline is not None and offline.why == "words":
            return offline
        if answer.verdict == "operator":
            # Only a way out the menu names as a person; else the navigator's own fallback, in its time.
            way_out = operator_option(options)
            return Choice(way_out, 1.0, "model") if way_out is not None else None
        return None  # wait, dead_end: nothing here; the navigator waits for the repeat, then gives up


def menu_completion(config: Config) -> Completion | None:
    """The model a call's menu walk asks ([menus] chooser with [llm] provider), None: offline."""
    return model_completion(config.menus, config.effective_llm_provider, config.openai, config.ollama)


def offered_as(chosen: MenuOption, options: Sequence[MenuOption]) -> MenuOption | None:
    """The option among `options` with the chosen one's key (or word): never one the menu did not offer."""
    for option in options:
        if (chosen.key and option.key == chosen.key) or (not chosen.key and chosen.word and option.word == chosen.word):
            return option
    return None


def model_completion(config: MenusConfig, provider: str, openai: OpenAIConfig,
                     ollama: OllamaConfig) -> Completion | None:
    """The completion [menus] asks for: the configured [llm] provider's model when it is openai or
    ollama and the chooser is "auto" or "model"; None for the offline matcher alone."""
    if config.chooser == "offline" or provider not in ("openai", "ollama"):
        if config.chooser == "model":
            log.warning("[menus] chooser = \"model\" needs [llm] provider openai or ollama: choosing offline")
        return None
    if provider == "openai":
        return _openai(openai.base_url, openai.api_key, openai.model, config.model_max_tokens)
    if ollama.api == "openai":
        return _openai(f"{ollama.base_url.strip().rstrip('/')}/v1", "ollama", ollama.model, config.model_max_tokens)
    return _ollama(ollama.base_url, ollama.model, config.model_max_tokens)


@functools.cache
def _openai(base_url: str, api_key: str, model: str, max_tokens: int) -> Completion:
    """One client per endpoint and model, shared by the process's calls (its connections are pooled)."""
    import openai as sdk

    client = sdk.AsyncOpenAI(api_key=api_key or "none", base_url=base_url.strip().rstrip("/"), max_retries=0)

    async def complete(system: str, user: str) -> str:
        reply = await client.chat.completions.create(
            model=model, temperature=0, max_tokens=max_tokens,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        return (reply.choices[0].message.content or "") if reply.choices else ""

    return complete


@functools.cache
def _ollama(base_url: str, model: str, max_tokens: int) -> Completion:
    import httpx

    client = httpx.AsyncClient(base_url=base_url.strip().rstrip("/"))

    async def complete(system: str, user: str) -> str:
        response = await client.post("/api/chat", json={
            "model": model, "stream": False, "format": "json",
            "options": {"temperature": 0, "num_predict": max_tokens},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
        response.raise_for_status()
        return str((response.json().get("message") or {}).get("content") or "")

    return complete
