FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY indexer ./indexer
RUN pip install --no-cache-dir .
COPY mappings ./mappings
COPY examples ./examples
USER nobody
EXPOSE 9464
ENTRYPOINT ["indexer"]
CMD ["run", "--config", "/app/examples/demo.toml"]
