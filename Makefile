PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: demo demo-spark test kafka generate check-generated bench fuzz fuzz-asan clean

FAMILY  ?= records
SECONDS ?= 60
ASAN    := build/asan

$(STAMP): pyproject.toml setup.py kprotocol/_speedups.c kprotocol/capture/_walk.c
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

# Coverage-guided fuzzing of one family (messages, frames, userdata, records, coordinator, captures, gateway).
fuzz: $(STAMP)
	$(BIN)/python -m kprotocol.fuzz $(FAMILY) --seconds $(SECONDS)

# The same with the C extension built with AddressSanitizer (a copy of the package under build/asan).
fuzz-asan: $(STAMP)
	rm -rf $(ASAN) && mkdir -p $(ASAN) && cp -r kprotocol compat $(ASAN)/ && rm -f $(ASAN)/kprotocol/_speedups*.so $(ASAN)/kprotocol/capture/_walk*.so
	cd $(ASAN) && CFLAGS="-fsanitize=address -fno-omit-frame-pointer -O1 -g" LDFLAGS="-fsanitize=address" \
		$(CURDIR)/$(BIN)/python $(CURDIR)/setup.py -q build_ext --inplace
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 LD_PRELOAD="$$(cc -print-file-name=libasan.so)" \
		KPROTOCOL_FUZZ_ROOT=$(CURDIR) $(CURDIR)/$(BIN)/python -c 'import kprotocol._speedups as s; assert "/$(ASAN)/" in s.__file__, s.__file__' && \
		ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 LD_PRELOAD="$$(cc -print-file-name=libasan.so)" \
		KPROTOCOL_FUZZ_ROOT=$(CURDIR) $(CURDIR)/$(BIN)/python -m kprotocol.fuzz $(FAMILY) --seconds $(SECONDS) \
		--corpus $(CURDIR)/build/fuzz/corpus/$(FAMILY)

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/streams_userdata.py
	$(BIN)/python bench/records.py
	$(BIN)/python bench/assignor.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
