"""Tests of the NodeNUMAResource algorithm core: CPU topology, node options, the CPU
accumulator, allocation bookkeeping, NUMA hints and admission, scores and pod policies."""
