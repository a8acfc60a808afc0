"""Arm Ethos-U: the Vela compiler adapter (``vela``: Vela run in process, ``vela_run``; the
graph rewrites Vela needs, ``vela_graph``; what Vela refuses and why, ``vela_support``) and
the payload it writes, the Vela bin stream ``EthosUBackend`` reads (``payload``)."""
