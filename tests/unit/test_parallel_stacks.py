"""Each test process's stack (`devtools.parallel`): its own ports, none another process's or among
the kernel's ephemeral ones."""

import pytest

from devtools.parallel import PORTS, SERVICES_ABOVE, ephemeral_ports, stack_of_process

pytestmark = pytest.mark.unit


def ports_of(number: int) -> set[int]:
    """Every port process `number` listens on, its test services' included."""
    variables = stack_of_process(number, {"LAKEFS_DELTA_STACK_DIR": "/tmp/stack"}) or {
        name: str(port) for name, port in PORTS.items()}
    service = int(variables["LAKEFS_DELTA_TEST_SERVICE_PORT"])
    return {int(variables[name]) for name in PORTS} | set(range(service, service + SERVICES_ABOVE + 1))


def test_three_processes_listen_on_ports_of_their_own_below_the_ephemeral_ones():
    processes = [ports_of(number) for number in range(3)]
    assert not processes[0] & processes[1] and not processes[0] & processes[2] and not processes[1] & processes[2]
    assert max(max(ports) for ports in processes) < ephemeral_ports().start


def test_a_process_whose_ports_would_be_ephemeral_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="ephemeral ports"):
        stack_of_process(3, {"LAKEFS_DELTA_STACK_DIR": "/tmp/stack"})


def test_process_n_lives_beside_the_first_stack():
    assert stack_of_process(2, {"LAKEFS_DELTA_STACK_DIR": "/tmp/stack/"})["LAKEFS_DELTA_STACK_DIR"] == "/tmp/stack-2"
    assert stack_of_process(0, {}) == {}
