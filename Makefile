.PHONY: setup demo test bench stack-up stack-down

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test:
	bash scripts/test.sh

bench: setup
	.venv/bin/python -m bench

stack-up: setup
	.venv/bin/python -m devtools.stack up

stack-down:
	.venv/bin/python -m devtools.stack down
