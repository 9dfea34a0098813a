# One image for every squall daemon: `squall nimbus`, `squall supervisor`, and the workers
# that supervisors start (they run `python -m squall.daemons.worker.main` in this image).
FROM python:3.11-slim

RUN useradd --create-home --uid 1000 squall
WORKDIR /opt/squall
COPY pyproject.toml README.md ./
COPY squall ./squall
COPY daemons ./daemons
COPY messaging ./messaging
COPY conf ./conf
RUN pip install --no-cache-dir . && mkdir -p /var/lib/squall && chown squall /var/lib/squall

# Daemons run as squall; compose runs supervisors as root (user: root) so that they start each
# topology's workers as a user of their own, which needs no account here.
USER squall
ENV SQUALL_CONF=/etc/squall/squall.yaml
# Daemons run in the foreground and log to stdout (JSON with --log-format json).
ENTRYPOINT ["squall"]
CMD ["--help"]
