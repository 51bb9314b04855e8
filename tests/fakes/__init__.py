"""Local stand-ins for paid services, speaking their real wire protocols so production clients run
unchanged against them: FakeOpenAI (chat, transcription, speech, embeddings), FakeOllama (native
/api/chat), FakeDeepgram (live WebSocket) and FakeAgent (bring-your-own-agent endpoint)."""
