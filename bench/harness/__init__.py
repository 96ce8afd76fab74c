"""What the bench scripts share; a script imports these and the project's packages, never another script.

    rounds.py      QUIET / quiet, a measured node's options, and play: a bench node's rounds, in order, timed
    swarm.py       run_swarm: N nodes in one process on the in-memory transport, round by round
    teachers.py    the teacher bench's pairings and arms, run_one (a student beside its frozen teacher or a peer)
                   and teacher_dir (the frozen teacher, trained once and cached)
    stats.py       t95, interval, summary, paired: the one 95 % t-interval of a mean and of a paired difference
    pool.py        run_jobs: the resumable process pool that appends each result to a JSONL results file
    arms.py        the arms runner: the jobs a results file lacks (pending, run_arms), cells by seed, compare
                   (paired differences by seed), Rule and judge (the decision rules written before the runs)
    memory.py      job_bytes, fits: a job's memory estimated before it starts; refuse or run fewer side by side
    output.py      results_dir(family), write_json (with the machine), table, load_jsonl
    options.py     parse_value / parse_sets: `--set key=value` overrides as a config reads them
    models.py      model_cached, cached_models, each lab model's own task (task_source), set_threads
    peers.py       real hivemind peers without a model (run_level) and the records they publish
                   (synthetic_records)
    dht_probe.py   counters inside hivemind's DHT processes and timers around the transport's DHT reads
    attacks.py     what a hostile peer sends to exhaust a node (the hostile tests and the soak's attackers)
                   and the gossipsub RPC it writes by hand (uvarint, publish_rpc)
    records.py     record / completion: made-up rollout records, the one factory benches and tests build them with
    identities.py  many throwaway identities: cached RSA keys and a validator that signs for all of them
    netns.py       Hosts: network namespaces on one virtual switch, each host's outgoing frames delayed if asked
                   (netem, or a switch in user space where the kernel lacks it); RTTs between them
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a bench never downloads
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
