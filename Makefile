.PHONY: setup demo test unit bench stack-up stack-down

# Python writes the bytecode of what it imports (into `__pycache__`, ignored by git), so each later process
# loads it instead of compiling again, whatever the shell says (this machine's sets PYTHONDONTWRITEBYTECODE):
# a worker's imports took 2.7 s of CPU compiled from source, 1.5 s from bytecode; the unit tests 59 s, 49 s
unexport PYTHONDONTWRITEBYTECODE

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# the unit tests alone, in two processes: no stack, no Spark (sets up the virtualenv first only when it is missing)
unit:
	@test -x .venv/bin/pytest || bash scripts/setup.sh
	.venv/bin/lint-imports --no-logo
	.venv/bin/pytest -m unit -q -n 2

bench: setup
	.venv/bin/python -m bench

stack-up: setup
	.venv/bin/python -m devtools.stack up

stack-down:
	.venv/bin/python -m devtools.stack down
