# duplex_es — the two set-up commands are `make demo` and `make test`; both install what is missing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CLIENTS_STAMP := $(VENV)/.clients-installed-stamp
DB     ?=
# Server VAD's neural model: the silero-vad wheel for its bundled ONNX file only, without the torch
# it declares (onnxruntime, from the extra `vad`, runs it): pyproject.toml, extra `vad`.
SILERO := silero-vad==6.2.3

.PHONY: install demo test serve worker bench chaos postgres browser clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,tools,vad]"
	$(BIN)/python -m pip install --quiet --no-deps $(SILERO)
	@touch $(STAMP)

## install: create .venv and install duplex_es, its tooling (demo, chaos, bench, loadgen: the extra
## `tools`, which the runtime does not need), its test tools and server VAD's neural model (the extra
## `vad` and silero-vad without its torch dependency) — only what is missing
install: $(STAMP)

## demo: speak the fixture question through serve + worker on a new SQLite file; show replay and audit
demo: install
	$(BIN)/duplex-es demo

## test: the whole suite, on SQLite and on the local PostgreSQL (with the tools extra, so the
## benchmark's smoke test runs too, and the clients extra: the four Realtime clients the tests drive;
## Debian's chromium drives the inspector's page: see `browser`)
test: $(CLIENTS_STAMP) postgres browser
	$(BIN)/python -m pytest -q

$(CLIENTS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test,tools,clients]"
	@touch $(CLIENTS_STAMP)

## serve / worker: run the server and a worker on $(DB) (default: ./duplex_es.db)
serve: install
	$(BIN)/duplex-es serve $(if $(DB),--db $(DB))

worker: install
	$(BIN)/duplex-es worker $(if $(DB),--db $(DB))

## bench: issue 6's rows on SQLite and PostgreSQL, each against eventsourcing 9.5.6 and raw driver
## loops in the same run; writes bench/results.json and bench/RESULTS.md (about 30 minutes: row 15,
## full-duplex sessions one worker holds in real time, ramps real-time sessions for about 13 of them).
## The peers and the HDR histograms are in the extra `tools` (pyproject.toml), with the demo's SDK.
bench: install postgres
	$(BIN)/duplex-es bench

## chaos: scripted speech and world sessions while servers and workers are SIGKILLed and restarted;
## checks that nothing acknowledged is lost or doubled (exit 1 on a violation). KILLS=12 SEED=1 DB=...
KILLS ?= 12
SEED  ?= 1
chaos: install
	$(BIN)/duplex-es chaos --kills $(KILLS) --seed $(SEED) $(if $(DB),--db $(DB))

## postgres: start the local PostgreSQL cluster if it is not running (the tests need it)
postgres:
	@scripts/ensure-postgres

## browser: Debian's chromium and chromium-driver for the inspector's browser test
## (tests/system/test_inspector_browser.py), installed with apt only when /usr/bin/chromium or
## /usr/bin/chromedriver is missing (sudo when not root; apt-get update only if the install fails)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
	  $(SUDO) apt-get install -y chromium chromium-driver || \
	  { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver; }

clean:
	rm -rf $(VENV) demo-output chaos-output .pytest_cache .hypothesis *.egg-info
