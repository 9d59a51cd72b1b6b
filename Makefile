PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2
# `make demo` has its own virtualenv: kprotocol without extras (about 115 MB; the test one, every extra, 1.3 GB).
DEMO_VENV  := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: demo demo-spark test test-migration test-gateway-cluster kafka generate check-generated bench fuzz fuzz-asan fuzz-coordinator clean prereqs prereqs-demo

FAMILY  ?= records
SECONDS ?= 60
ASAN    := build/asan

$(STAMP): pyproject.toml setup.py kprotocol/_speedups.c kprotocol/capture/_walk.c kprotocol/coordinator_topics/_offsets.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Every prerequisite of `make test` (or of `make demo`), in under a second: one line naming the install command.
prereqs:
	@PYTHON=$(PYTHON) sh .ci/prereqs test

prereqs-demo:
	@PYTHON=$(PYTHON) sh .ci/prereqs demo

$(DEMO_STAMP): pyproject.toml setup.py kprotocol/_speedups.c kprotocol/capture/_walk.c kprotocol/coordinator_topics/_offsets.c
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q --upgrade pip
	$(DEMO_VENV)/bin/pip install -q -e .
	touch $(DEMO_STAMP)

demo: prereqs-demo
	@$(MAKE) --no-print-directory $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python -m kprotocol demo

demo-spark: $(STAMP)
	@# fixtures/offsets holds damaged segments on purpose: exit 1 says they were found (and tabled)
	$(BIN)/python -m kprotocol pipeline offsets fixtures/offsets fixtures/kafka/data --out build/demo-tables --split-mb 0.002 \
		|| test $$? = 1
	$(BIN)/python -m kprotocol pipeline captures fixtures/captures --out build/demo-tables --ports 60127,36897 --split-mb 0.05
	$(BIN)/python -m kprotocol report build/demo-tables --out build/report.html
	@echo "report: build/report.html"

test: prereqs
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadgroup --durations=30 tests

# The whole migration matrix of Apache Kafka's example applications (tests/test_migration_apps.py); its table
# goes to build/migration-matrix.md. About 3 minutes a shape. Then the gateway migration at both guarantees.
test-migration: prereqs
	@$(MAKE) --no-print-directory $(STAMP)
	KPROTOCOL_MIGRATION=matrix $(BIN)/python -m pytest -q -s -n 0 tests/test_migration_apps.py tests/test_migration_gateway.py

# The gateway in front of a three-node SASL_SSL cluster: a Streams migration across node restarts and leader
# moves, metrics scraped throughout (tests/gateway_cluster_migration.py). A few minutes.
test-gateway-cluster: prereqs
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/python -m pytest -q -s -n 0 tests/gateway_cluster_migration.py

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

# Differential fuzzing of the streams-group coordinator against a real Kafka broker, then the migration
# coordinator with classic members (tests/coordinator_fuzz.py; failures kept in build/fuzz/coordinator).
fuzz-coordinator: $(STAMP)
	$(BIN)/python tests/coordinator_fuzz.py --seconds $(SECONDS)

# The gateway under hostile clients (issue 24), the long battery: a client that never reads, a 2 MB request,
# a flood of idle connections, a broker going away; real broker, a good client running (a few minutes).
.PHONY: test-gateway-hostile fuzz-managed
test-gateway-hostile: $(STAMP)
	$(BIN)/python -m pytest -q -s -n 0 tests/gateway_hostile_battery.py

# The gateway's managed-group request path fed field-level mutations of valid requests (RUNS executions).
RUNS ?= 1000000
fuzz-managed: $(STAMP)
	$(BIN)/python -m kprotocol.fuzz managed --runs $(RUNS) --seconds 0

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/streams_userdata.py
	$(BIN)/python bench/records.py
	$(BIN)/python bench/assignor.py --quick

# `kprotocol offsets decode` beside Kafka's kafka-dump-log on the same generated segments (a few minutes).
.PHONY: bench-offsets
bench-offsets: $(STAMP)
	$(BIN)/python bench/offsets.py

# The gateway beside the broker at the scale of Kafka Streams fleets (issue 35): simulated members over TCP,
# streams, classic and mixed groups of 100 and 1000 members and 100 groups of 50; table on stdout, JSON in build/.
# The incident report on synthetic tables of 30,000 and 300,000 rebalances: time and peak memory.
.PHONY: bench-report
bench-report: $(STAMP)
	$(BIN)/python bench/report.py

.PHONY: bench-gateway-scale
bench-gateway-scale: $(STAMP)
	mkdir -p build
	$(BIN)/python bench/gateway_scale.py --json build/gateway-scale.json

# The capture parsers' bounded memory at full size: a 70 MB capture of a million one-packet connections (a minute).
.PHONY: capture-scale
capture-scale: $(STAMP)
	KPROTOCOL_SCALE=1 $(BIN)/python -m pytest -q -s -n 0 tests/test_capture_bounded.py -k settled

clean:
	rm -rf $(VENV) $(DEMO_VENV) build *.egg-info
