"""The operator's tools: the `swarm` command line and what it serves around a node (above node/).

  cli/       the `swarm` command line (also `python -m ops.cli`), with `swarm plot` and `swarm config doc`
  dashboard/ `swarm dashboard`: a live page of one or several runs
  export     `swarm export`: a run's newest checkpoint as a folder transformers or peft loads
"""
