"""Upper bounds on sizes a user can ask for, shared by the CLI options and the scenario file.

They are bounds on what gpuplan's searches can do in reasonable time and memory, not
hardware figures: above them a command would run for minutes to hours, overflow a 64-bit
integer, or allocate more memory than the machine has, instead of answering. Each is far
above any fleet or training run gpuplan is meant to plan; a value above it is refused with
the option or field named.

Measured on one core of the development machine (``forecast train --model llama3.1-8b
--gpu h100 --gpus N``): 2^24 GPUs takes 0.8 s, 10^8 takes 11 s and 10^9 did not finish in
120 s (the layout search enumerates the divisors of N); ``schedule --gpus 10^9`` builds
10^8 nodes and did not finish in 60 s; ``forecast infer --requests 10^8`` did not finish
in 60 s (the simulation keeps per-request arrays).
"""

from __future__ import annotations

#: Largest cluster (GPUs) of a forecast, plan or scheduling simulation: 2^24 = 16,777,216.
MAX_GPUS = 2**24

#: Largest number of training tokens: 1e18 (6 x params x tokens stays finite in float64
#: for any catalog model; 1e308 tokens overflowed the FLOP count to infinity).
MAX_TOKENS = 1e18

#: Largest global batch in tokens: 2^40 (sequence counts stay far inside int64 in the
#: layout search's divisibility tests; 1e300 overflowed them).
MAX_BATCH_TOKENS = 2**40

#: Largest global batch in sequences: 2^31.
MAX_BATCH_SEQUENCES = 2**31

#: Most requests one serving simulation draws per replica count: 10^6 (500x the default).
MAX_SIM_REQUESTS = 10**6

#: Most jobs of one kind a shared-cluster scenario may ask for (``count``): 10^6.
MAX_JOBS = 10**6
