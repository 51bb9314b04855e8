"""The fakes themselves: what other suites rely on when they use them."""

from __future__ import annotations

import httpx
import numpy as np
import openai

from tests.fakes.openai_fake import FakeOpenAI


async def test_embeddings_are_deterministic_unit_vectors_through_the_sdk() -> None:
    async with FakeOpenAI(embedding_dims=64) as fake:
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.url + "/v1")
        try:
            # The SDK asks for base64 by default and decodes it; the fake must answer in kind.
            first = await client.embeddings.create(model="text-embedding-3-small", input=["tea", "coffee", "tea"])
            sized = await client.embeddings.create(model="text-embedding-3-small", input="tea", dimensions=16)
        finally:
            await client.close()
    tea, coffee, tea_again = (np.asarray(item.embedding) for item in first.data)
    assert tea.shape == (64,) and np.isclose(np.linalg.norm(tea), 1.0, atol=1e-5)
    assert np.allclose(tea, tea_again) and not np.allclose(tea, coffee)
    assert len(sized.data[0].embedding) == 16
    assert fake.embedding_requests[0]["input"] == ["tea", "coffee", "tea"]


def test_openai_fake_answers_sync_clients_with_float_embeddings() -> None:
    with FakeOpenAI(embedding_dims=8) as fake:
        body = {"model": "m", "input": "hello", "encoding_format": "float"}
        reply = httpx.post(fake.url + "/v1/embeddings", json=body, timeout=10).json()
    assert len(reply["data"][0]["embedding"]) == 8


async def test_openai_fake_rejects_a_wrong_key_like_the_real_api() -> None:
    async with FakeOpenAI(api_key="right") as fake, httpx.AsyncClient() as http:
        reply = await http.post(fake.url + "/v1/chat/completions", headers={"Authorization": "Bearer wrong"},
                                json={"model": "m", "messages": []})
    assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"


async def test_openai_fake_speech_is_a_24khz_tone_sized_by_the_text() -> None:
    async with FakeOpenAI() as fake, httpx.AsyncClient() as http:
        reply = await http.post(fake.url + "/v1/audio/speech",
                                json={"model": "tts-1", "voice": "alloy", "input": "x" * 50, "response_format": "pcm"})
    assert len(reply.content) == int(50 * fake.speech_seconds_per_char * 24000) * 2
