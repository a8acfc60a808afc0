"""The estimators: the figures a compile's report gives, computed from the program and the
target. Memory (``memory``: flash, RAM, the regions they fit), latency (``latency``: NPU
cycles or their bound, the CPU's kernels by ``cpu_cycles`` and the published figures it is
checked against, ``published``), the per-layer error (``layers``), the stream's budget
(``stream``) and the error measure they share (``metrics``). The report (``report``) holds
their results and shows them."""
