"""Sybil-bounded work: what many throwaway identities cost a node (`python -m bench.reliability.sybil`).

    __main__   the orchestrator: the arms, their windows and the report
    roles      its processes: the honest peers, the throwaway identities, the victim
"""
