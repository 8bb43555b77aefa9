"""gpu.graphs.LaunchGraphs: which launch lists become CUDA graphs, checked without a GPU (the
capture is replaced by a recorder); the graphs' results on the device are checked by the GPU
tests of the evidence kernels and the DP (tests/test_gpu_surface.py, tests/test_gpu.py)."""

from __future__ import annotations

import pytest

from gpu import graphs


class Kernel:
    """A prepared function that records its launches into ``log``."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        self.log.append((stream, self.name, grid, block, args, shared_size))


class RecordedGraph:
    def __init__(self, launches: list, log: list):
        self.launches, self.log = launches, log

    def launch(self, stream):
        self.log.append((stream, "graph", tuple(launch[1:] for launch in self.launches)))


@pytest.fixture
def recorder(monkeypatch):
    """(log of launches, log of captures); capture() records the queued launches as a graph."""
    log, captures = [], []

    def capture(stream, queue):
        before = len(log)
        queue(stream)  # the kernels log their launches: they go into the graph instead
        captured = log[before:]
        del log[before:]
        captures.append(captured)
        return RecordedGraph(captured, log)

    monkeypatch.setattr(graphs, "capture", capture)
    return log, captures


def test_a_list_is_captured_the_third_time_and_replayed_from_then_on(recorder):
    log, captures = recorder
    first, second = Kernel("first", log), Kernel("second", log)
    launches = [(first, (4, 2, 1), (32, 8, 1), (1000, 3), 0),
                (second, (1, 1, 1), (256, 1, 1), (1000,), 64)]
    cache = graphs.LaunchGraphs()
    for _ in range(2):  # launched as it is the first two times
        log.clear()
        cache.launch("stream", launches)
        assert [entry[1] for entry in log] == ["first", "second"]
        assert log[0] == ("stream", "first", (4, 2, 1), (32, 8, 1), (1000, 3), 0)
        assert log[1][-1] == 64
    assert captures == []
    log.clear()
    cache.launch("stream", list(launches))  # an equal list: captured, then the graph launched
    assert len(captures) == 1
    assert [entry[1] for entry in captures[0]] == ["first", "second"]
    assert [entry[1] for entry in log] == ["graph"]
    log.clear()
    cache.launch("stream", launches)
    assert len(captures) == 1
    assert [entry[1] for entry in log] == ["graph"]


def test_a_changed_argument_grid_or_kernel_is_another_list(recorder):
    log, captures = recorder
    first, other = Kernel("first", log), Kernel("other", log)
    base = (first, (4, 2, 1), (32, 8, 1), (1000, 3), 0)
    cache = graphs.LaunchGraphs(direct=1)
    cache.launch("s", [base])
    for changed in [(first, (4, 2, 1), (32, 8, 1), (1000, 4), 0),
                    (first, (5, 2, 1), (32, 8, 1), (1000, 3), 0),
                    (first, (4, 2, 1), (32, 8, 1), (1000, 3), 16),
                    (other, (4, 2, 1), (32, 8, 1), (1000, 3), 0)]:
        log.clear()
        cache.launch("s", [changed])
        assert captures == []
        assert len(log) == 1
        assert log[0][1] != "graph"


def test_without_graphs_the_launches_run_as_they_are(monkeypatch):
    log = []
    monkeypatch.setattr(graphs, "capture", lambda stream, queue: None)
    kernel = Kernel("k", log)
    cache = graphs.LaunchGraphs()
    for _ in range(4):
        cache.launch("s", [(kernel, (1, 1, 1), (32, 1, 1), (7,), 0)])
    assert [entry[1] for entry in log] == ["k"] * 4


def test_only_the_most_recently_used_graphs_are_kept(recorder):
    log, captures = recorder
    kernel = Kernel("k", log)
    cache = graphs.LaunchGraphs(direct=1, graphs=2)
    lists = [[(kernel, (1, 1, 1), (32, 1, 1), (value,), 0)] for value in range(3)]
    for launches in lists:
        cache.launch("s", launches)
        cache.launch("s", launches)
    assert len(captures) == 3
    cache.launch("s", lists[2])  # kept: replayed
    cache.launch("s", lists[0])  # dropped: launched as it is once more
    assert len(captures) == 3
    log.clear()
    cache.launch("s", lists[0])  # its second sight since: captured again
    assert len(captures) == 4
    assert [entry[1] for entry in log] == ["graph"]
    cache.clear()
    log.clear()
    cache.launch("s", lists[0])
    assert [entry[1] for entry in log] == ["k"]


def test_a_kept_key_finds_the_graph_its_list_made(recorder):
    """A caller that keeps a list's launch_key (the network's batched passes, the DP's plans)
    passes it instead of having it worked out: the same graph either way."""
    log, captures = recorder
    launches = [(Kernel("first", log), (4, 2, 1), (32, 8, 1), (1000, 3), 0)]
    key = graphs.launch_key(launches)
    cache = graphs.LaunchGraphs(direct=1)
    cache.launch("s", launches, key)
    cache.launch("s", launches)  # the worked-out key is the kept one: captured now
    assert len(captures) == 1
    log.clear()
    cache.launch("s", list(launches), key)
    assert [entry[1] for entry in log] == ["graph"]
    assert len(captures) == 1
