# voicegate: one image for every node, built from the wheel as `pip install` users get it.
#   docker build -t voicegate --build-arg VOICEGATE_BUILD_REVISION="$(git rev-parse --short=12 HEAD)" .
# The build argument records the git revision (`voicegate --version`, /health): the build context has no
# .git. Without it the image reports the version alone.

# Stage 1: the wheel, from the sources pyproject.toml packages. Nothing else of the tree reaches the image.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY voicegate ./voicegate
ARG VOICEGATE_BUILD_REVISION=""
RUN VOICEGATE_BUILD_REVISION="$VOICEGATE_BUILD_REVISION" \
    pip wheel --no-cache-dir --no-deps --disable-pip-version-check --wheel-dir /wheels .

# Stage 2: the wheel installed with its dependencies into the system Python.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VOICEGATE_SERVER__DATA_DIR=/var/lib/voicegate

# espeak-ng speaks (the light TTS); sox converts audio for `voicegate talk`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng sox \
    && rm -rf /var/lib/apt/lists/*

COPY --from=wheel /wheels /tmp/wheels
RUN pip install /tmp/wheels/voicegate-*.whl \
    && rm -rf /tmp/wheels \
    && python -m voicegate.internal.turn.weights
# ^ the end-of-turn model (Smart Turn v3.2) from its pinned PyPI wheel, SHA-256-checked, into the image.

# Never run a network service as root. Its home is the data directory (server.data_dir) and the working
# directory: a config.toml mounted there is read, else the built-in defaults and VOICEGATE_* variables
# (or mount one anywhere and set VOICEGATE_CONFIG). `docker run --rm voicegate config init - > config.toml`
# gives the commented defaults to start from.
RUN useradd --system --create-home --home-dir /var/lib/voicegate voicegate
USER voicegate
WORKDIR /var/lib/voicegate

# HTTP (page, WHIP, API), SIP over UDP and TCP, and the RTP port range of the default config.
EXPOSE 8080 5060/udp 5060/tcp 20000-29999/udp
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2).status != 200)"

ENTRYPOINT ["voicegate"]
CMD ["serve"]
