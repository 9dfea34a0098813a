# One image for every squall daemon: `squall nimbus`, `squall supervisor`, and the workers
# that supervisors start (`python -m squall.daemons.worker.main` in this image), on Debian's
# own Python (the distribution users install the wheel on).
#   docker build -t squall:local .                       # or: docker compose build
#   docker build --build-arg BASE_IMAGE=my/debian:12 .   # any Debian 12 (bookworm) image
# Without an image registry, scripts/docker-images.sh makes debian:bookworm-slim from Debian's
# packages first (docs/operations/cluster.md, "Docker").
ARG BASE_IMAGE=debian:bookworm-slim

# --- build: the compiler, the headers and the build requirements; none of it ships ----------
FROM ${BASE_IMAGE} AS build
# A network that inspects TLS: its CA certificate(s) in PEM, for pip and apt inside the build
# (the final image keeps only Debian's CA list).
ARG EXTRA_CA_CERTS=""
# The C compiler's optimisation level for the hot modules (setup.py; the suite builds at -O0).
ARG SQUALL_BUILD_OPT=-O2
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-dev gcc libc6-dev ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && if [ -n "$EXTRA_CA_CERTS" ]; then \
      printf '%s\n' "$EXTRA_CA_CERTS" > /usr/local/share/ca-certificates/build-extra.crt && update-ca-certificates; \
    fi
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The dependencies first, in a layer that changes only with pyproject.toml's list of them.
COPY pyproject.toml /src/
RUN python3 -m venv /opt/squall && python3 -m venv /opt/build \
 && /opt/build/bin/pip install -q "setuptools>=77" "Cython>=3.0" \
 && /opt/build/bin/python -c "import tomllib; print(*tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > /tmp/requirements.txt \
 && /opt/squall/bin/pip install -q -r /tmp/requirements.txt
# Then squall itself: the wheel a release builds (its hot modules compiled), installed alone.
COPY setup.py README.md /src/
COPY squall /src/squall
COPY daemons /src/daemons
COPY messaging /src/messaging
COPY conf /src/conf
RUN /opt/build/bin/pip wheel -q --no-deps --no-build-isolation -w /tmp/wheels /src \
 && /opt/squall/bin/pip install -q --no-deps /tmp/wheels/squall-*.whl \
 && /opt/squall/bin/python -c "import squall.tuple, squall.compiled as c; assert c.is_compiled(squall.tuple)"

# --- the image: Debian's Python and the environment built above ----------------------------
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --create-home --uid 1000 squall \
 && mkdir -p /var/lib/squall && chown squall /var/lib/squall
COPY --from=build /opt/squall /opt/squall
ENV PATH=/opt/squall/bin:$PATH SQUALL_CONF=/etc/squall/squall.yaml
# Daemons run as squall. docker-compose.yml runs supervisors as root (and says why): they
# start each topology's workers as a user of their own, which needs no account here; the
# image's Python and /opt/squall are readable by every user.
USER squall
WORKDIR /var/lib/squall
# Daemons run in the foreground and log to stdout (JSON with --log-format json).
ENTRYPOINT ["squall"]
CMD ["--help"]
