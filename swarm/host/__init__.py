"""This machine's side of the swarm: is the machinery running, can it take part, the local processes.

  health  is this node's swarm machinery (DHT child, p2pd) still running?
  doctor  `swarm doctor`'s checks: can this machine take part, and what to fix
  local   process plumbing of `swarm local`
  meminfo this machine's available memory (MemAvailable), for the micro-batch plan and bench jobs
"""
