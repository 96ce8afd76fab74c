"""`swarm dashboard RUN_DIR...` (and `swarm local --dashboard`): a live page of one or several runs.

ops.dashboard.state reads the run dirs (metrics.jsonl, config.json, node.json or node.log) into one snapshot,
ops.dashboard.server serves it and the page (static/, uPlot vendored under static/vendor) on
127.0.0.1; the page polls the snapshot every 2 s. deploy/grafana holds the same panels over the
node's Prometheus metrics.
"""
