PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: demo demo-spark test kafka generate check-generated bench clean

$(STAMP): pyproject.toml setup.py kprotocol/_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m kprotocol demo

demo-spark: $(STAMP)
	$(BIN)/python -m kprotocol pipeline offsets fixtures/offsets fixtures/kafka/data --out build/demo-tables --split-mb 0.002
	$(BIN)/python -m kprotocol pipeline captures fixtures/captures --out build/demo-tables --ports 60127,36897 --split-mb 0.05
	$(BIN)/python -m kprotocol report build/demo-tables --out build/report.html
	@echo "report: build/report.html"

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadgroup tests

kafka: $(STAMP)
	$(BIN)/python -m kprotocol kafka broker

generate: $(STAMP)
	$(BIN)/python -m codegen

check-generated: $(STAMP)
	$(BIN)/python -m codegen --check

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/streams_userdata.py
	$(BIN)/python bench/records.py
	$(BIN)/python bench/assignor.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
