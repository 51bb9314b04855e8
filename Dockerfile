# voicegate: one image for every node. Build: docker build -t voicegate .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VOICEGATE_SERVER__DATA_DIR=/var/lib/voicegate

# espeak-ng speaks (the offline TTS); sox converts audio for `voicegate talk`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng sox \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md config.toml ./
COPY server ./server
COPY internal ./internal
COPY migrations ./migrations
RUN pip install . \
    && python -m internal.turn.weights
# ^ the end-of-turn model (Smart Turn v3.2) from its pinned PyPI wheel, SHA-256-checked, into the image.

# Never run a network service as root.
RUN useradd --system --create-home --home-dir /var/lib/voicegate voicegate
USER voicegate

# HTTP (page, WHIP, API), SIP over UDP and TCP, and the RTP port range of config.toml.
EXPOSE 8080 5060/udp 5060/tcp 20000-29999/udp
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2).status != 200)"

ENTRYPOINT ["voicegate"]
CMD ["serve"]
