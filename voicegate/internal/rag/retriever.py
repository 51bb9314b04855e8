"""What the pipeline asks of knowledge retrieval, when it asks at all, and the configured retriever.

`Retriever` is the provider seam (pgvector, Supabase). `needs_retrieval` is the gate that keeps turns
with nothing to search for ("okay, thanks") off the retrieval path. `TurnRetrieval` is what a call
holds: the gate, the configured top-k, a bound on how long a turn waits, and one speculative
retrieval started during the turn-merge window (`pipeline.rag_prefetch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Protocol

log = logging.getLogger(__name__)

# A turn waits at most this long for retrieval, then goes on without knowledge: a late answer with
# no context beats silence on a phone line. pgvector answers in ~1-5 ms and an OpenAI embedding plus
# a Supabase RPC in ~150-300 ms, so this only ever cuts a backend that is in trouble.
TURN_RETRIEVAL_TIMEOUT_S = 3.0


class Retriever(Protocol):
    async def retrieve(self, text: str, top_k: int) -> list[str]:
        """The texts of the `top_k` chunks most similar to `text`, best first. Never raises for a
        backend or embedding failure (it is logged and the result is empty): a retrieval failure
        must never fail a turn."""
        ...

    async def aclose(self) -> None: ...


class RagConfigError(ValueError):
    """The [rag] settings name a provider whose settings are missing or unusable."""


# Words that on their own give a vector search nothing to anchor on: acknowledgements, courtesy,
# greetings and sign-offs, hesitation, stopwords and question words, number words, and date and time
# words (on a call a turn made only of those is almost always an answer to the agent's own question:
# "tomorrow at five", "yes, the second one"). Deliberately narrow: anything that could name a
# product, place or topic stays out, so the gate errs towards retrieving.
_FILLER_WORDS = frozenset(
    """
    yes yeah yep yup yah aye no nope nah sure okay okey alright right fine correct exactly indeed
    thanks thank cheers please welcome sorry pardon excuse
    hello hey hiya bye goodbye later morning afternoon evening night
    uhh umm hmm mmm mhm huh ahh ooh wow
    great good cool nice perfect awesome lovely wonderful excellent brilliant
    got see sounds mean guess think know
    the and but for not nor yet with without you your yours yourself are was were been being
    have has had having can could will would shall should may might must does did done doing
    this that these those what which who whom whose where when why how
    just very too also now some any all more most much lot lots here there then than like want need well let
    about from into onto over again still really actually maybe
    dont cant wont isnt didnt doesnt thats whats its youre ill ive theres lets
    one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred thousand million first second third fourth fifth half quarter
    midday noon midnight today tomorrow yesterday tonight oclock
    monday tuesday wednesday thursday friday saturday sunday
    january february march april june july august september october november december
    week weeks month months year years day days hour hours minute minutes next last
    """.split()
)
# Shorter words never count as content ("oh", "hi", "ok", "mm", "is", "a"); product codes of three
# letters or more ("BYD") do.
_MIN_CONTENT_LETTERS = 3
_NOT_LETTERS = re.compile(r"[^\w']+|[\d_]+")


def needs_retrieval(text: str) -> bool:
    """Whether a turn has a content word: three letters or more and not a filler word.

    "okay thanks", "mm-hm", "yes please", "goodbye", "tomorrow at five" skip retrieval; "parking",
    "when do you open on sunday", "do you stock BYD" retrieve. A name alone ("Sam") retrieves: it
    cannot be told from a product or a place, and a missed answer costs more than a wasted search.
    """
    for token in _NOT_LETTERS.split(text.lower().replace("\u2019", "'")):
        word = token.replace("'", "")
        if len(word) >= _MIN_CONTENT_LETTERS and word not in _FILLER_WORDS:
            return True
    return False


class TurnRetrieval:
    """One call's retrieval: gated, bounded, with at most one prefetch in flight.

    `prefetch(text)` starts retrieval while the turn-merge window is still open. `for_turn(text)`
    uses it when the released turn has the same text; when a later final was merged in, the prefetch
    answered the wrong question, so it is cancelled and the turn retrieves afresh.
    """

    def __init__(self, retriever: Retriever, top_k: int, timeout_s: float = TURN_RETRIEVAL_TIMEOUT_S) -> None:
        self.retriever = retriever
        self.top_k = top_k
        self.timeout_s = timeout_s
        self._pending: tuple[str, asyncio.Task[list[str]]] | None = None

    def prefetch(self, text: str) -> None:
        query = text.strip()
        if not needs_retrieval(query) or (self._pending is not None and self._pending[0] == query):
            return
        self._discard()
        self._pending = (query, asyncio.get_running_loop().create_task(self._bounded(query)))

    async def for_turn(self, text: str) -> list[str]:
        query = text.strip()
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending[0] == query:
                return await pending[1]
            pending[1].cancel()
        if not needs_retrieval(query):
            return []
        return await self._bounded(query)

    async def aclose(self) -> None:
        """At hang-up: a prefetch nobody will take is cancelled."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending[1]

    def _discard(self) -> None:
        if self._pending is not None:
            self._pending[1].cancel()
            self._pending = None

    async def _bounded(self, query: str) -> list[str]:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self.retriever.retrieve(query, self.top_k)
        except TimeoutError:
            log.warning("knowledge retrieval took longer than %.1f s; the turn goes on without it", self.timeout_s)
            return []
        except Exception as exc:  # a retriever must not raise, but a turn outlives one that does
            log.warning("knowledge retrieval failed (%s); the turn goes on without it", type(exc).__name__)
            return []

