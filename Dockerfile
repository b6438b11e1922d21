# The full image has a C compiler: the wheel is built there with the per-event modules
# compiled by mypyc and the native per-batch path built by cargo (setup.py), and only the
# wheel goes into the slim image. Rust comes from rustup's minimal profile, in this stage only.
FROM python:3.11 AS build
RUN curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY indexer ./indexer
COPY native ./native
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY mappings ./mappings
COPY examples ./examples
USER nobody
EXPOSE 9464
ENTRYPOINT ["indexer"]
CMD ["run", "--config", "/app/examples/demo.toml"]
