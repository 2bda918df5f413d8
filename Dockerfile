# One image for both fleetmend processes; the compose file and deploy/ pick the command.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY ledger ./ledger
COPY migrations ./migrations
COPY worker ./worker
COPY fleetsim ./fleetsim
RUN pip install --no-cache-dir . \
    && useradd --uid 10001 --no-create-home fleetmend
USER 10001
ENTRYPOINT ["fleetmend"]
CMD ["--help"]
