"""The Slurm launcher: submitit job arrays per resource signature, a durable manifest, and Slurm's states as records.

`submit_sweep` groups the cells by what they ask of Slurm (partition, gres, constraint, cpus, memory, time) and
submits each group as one job array through submitit, then writes `DIR/manifest.json` (cell -> job id) and
returns. `poll` asks Slurm about every job of the manifest in one `sacct` call and settles the records of jobs
that ended without finishing their own (killed, timed out, out of memory, cancelled, lost), so `status` and
`wait` can follow a sweep from any process, long after the one that submitted it has gone.

One module per job: `submit` (settings, resource signatures, job arrays), `active` (cells whose earlier job is
still pending or running: left alone, or cancelled with --force), `cell_job` (the job body Slurm runs,
with its requeue handling), `manifest` (DIR/manifest.json), `sacct` (asking Slurm about jobs), `settle` (a Slurm
end state as a record), `follow` (the cells' states, polling, waiting), `commands` (the CLI's entry points).
"""
