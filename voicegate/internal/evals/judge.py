"""The optional rubric: a language model reads the call's transcript and says whether it meets the rubric.

Only with an LLM configured (an OpenAI-compatible or Ollama model in the eval's config); without one the
check is skipped with that reason in every report, never counted as passed. The judge is asked for a
verdict on its first line so it is read the same way from any model; anything else is a failed check
quoting what it answered.
"""

from __future__ import annotations

from typing import Protocol

from voicegate.internal.evals.checks import Check, failed, passed, quote

JUDGE_TIMEOUT_S = 60.0
JUDGE_SYSTEM = (
    "You grade a phone call between a caller and a voice agent against a rubric written by the agent's "
    "deployer. Read the transcript and the rubric. Answer on the first line with exactly PASS or FAIL, "
    "then on the second line one short sentence saying why."
)
NO_LLM = "no LLM configured (set [openai] api_key, or llm.provider = \"ollama\", in the eval's config)"


class Completer(Protocol):
    async def complete(self, system: str, user: str, timeout_s: float) -> str: ...


def rubric_prompt(rubric: str, transcript: list[list[str]]) -> str:
    lines = "\n".join(f"{'Caller' if role == 'user' else 'Agent'}: {text}" for role, text in transcript)
    return f"Rubric:\n{rubric}\n\nTranscript:\n{lines or '(nothing was said)'}"


async def judge(rubric: str, transcript: list[list[str]], model: Completer | None, unavailable: str = NO_LLM) -> Check:
    name = "rubric"
    if model is None:
        return Check(name, "skipped", f"skipped: {unavailable}")
    try:
        answer = await model.complete(JUDGE_SYSTEM, rubric_prompt(rubric, transcript), JUDGE_TIMEOUT_S)
    except Exception as exc:  # a judge that fails is a check that could not pass, never a crash
        return failed(name, f"the judge could not answer: {exc}")
    verdict, _, why = answer.strip().partition("\n")
    word = verdict.strip().strip("*").upper()
    if word.startswith("PASS"):
        return passed(name, why.strip() or verdict)
    if word.startswith("FAIL"):
        return failed(name, why.strip() or verdict)
    return failed(name, f"the judge gave no verdict: {quote(answer)}")
