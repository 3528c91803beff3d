# syntax=docker/dockerfile:1
# MAS: one image for every role of docker-compose.yml (web, worker, beat,
# migrate). The default command serves HTTP and websockets with daphne.
FROM python:3.11-slim-bookworm

# torch is pinned and installed first, CPU-only: left to sentence-transformers,
# pip would pull a multi-GB CUDA build. Point TORCH_INDEX_URL at a mirror of
# the CPU index if you have one.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# PYTHONPATH: the code runs from /app (templates/, defs/ and manage.py live
# there), so /app wins over the copy `pip install .` puts in site-packages.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=mas_project.settings \
    MAS_VAR_DIR=/app/var \
    MAS_DEFS_ROOT=/data/defs

# bubblewrap: the sandbox of code_exec (tools_app/sandbox.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 mas \
 && useradd --system --uid 10001 --gid mas --home-dir /app --no-create-home --shell /usr/sbin/nologin mas

WORKDIR /app

RUN pip install "pip>=24" \
 && pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

# The dependencies get their own layer, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY . .
# collectstatic only reads settings: a placeholder DATABASE_URL keeps it from
# starting the embedded PostgreSQL that local runs use.
RUN pip install . \
 && DATABASE_URL=postgresql://build@127.0.0.1:1/build python manage.py collectstatic --noinput \
 && mkdir -p /app/var /data/defs \
 && chown -R mas:mas /app/var /data/defs

# The user `mas`, by number: runAsNonRoot checks can verify it.
USER 10001:10001
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "mas_project.asgi:application"]
