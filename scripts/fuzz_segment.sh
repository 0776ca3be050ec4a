#!/bin/bash
# One segment of a long fuzz campaign on the H200 device machine (no clang there), run from the
# checkout a device call carries, with carry [".dev-gpu", ".fz"]:
#   here:  scons variant=fuzz; strip build/fuzz/fuzz_* into bin/; tar czf .fz/bin.tgz bin;
#          tests/bench/gpu/pack.sh (the kit: its stand-ins carry the real tokenizers);
#          to resume, cat a previous segment's corpus/part-* > .fz/corpus.tgz
#   there: NG=3 NR=3 NT=3 NP=2 NS=1 NM=4 bash scripts/fuzz_segment.sh SECONDS
# Runs scripts/fuzz_multicore.sh for SECONDS with the tokenize target on the real tokenizers, and
# writes into $OUT: seg.txt (executions, coverage, artifacts per target), artifacts/, the first
# job's log tail per target, and the corpora as corpus/part-* (15 MB parts: a device call brings
# back only files below its size limit). Executions add up over segments (same binaries).
set -u
cd "$(dirname "$0")/.."
T=${1:-500}
mkdir -p /opt/fz
[ -x /opt/fz/bin/fuzz_gguf ] || tar xzf .fz/bin.tgz -C /opt/fz
W=/opt/fz/work
if [ ! -d $W/w ] && [ -f .fz/corpus.tgz ]; then mkdir -p $W; tar xzf .fz/corpus.tgz -C $W; fi
bash .dev-gpu/device.sh setup > /opt/fz/setup.log 2>&1 || { echo "kit setup failed"; tail -5 /opt/fz/setup.log; }
rm -f $W/w/*/fuzz-*.log
BIN=/opt/fz/bin WORK=$W \
    TOKENIZERS="--model=/opt/gpukit/models/smollm2.gguf --model2=/opt/gpukit/models/gemma3.gguf" \
    nice bash scripts/fuzz_multicore.sh "$T" | tee "$OUT/seg.txt"
for t in gguf grammar tokenize template snapshot sampler; do
    echo "== $t"
    grep -h "stat::number_of_executed_units\|stat::average_exec_per_sec" $W/w/$t/fuzz-*.log |
        awk '{a[$1] += $2; n[$1]++} END {for (k in a) print k, a[k], "(" n[k] " jobs)"}'
done | tee -a "$OUT/seg.txt"
mkdir -p "$OUT/logs" "$OUT/corpus"
for t in gguf grammar tokenize template snapshot sampler; do
    tail -c 3000 $W/w/$t/fuzz-0.log > "$OUT/logs/$t-0.log" 2>/dev/null
done
cp -r $W/a "$OUT/artifacts" 2>/dev/null
(cd $W && tar czf /opt/fz/corpus.tgz w/*/c a) && split -b 15m /opt/fz/corpus.tgz "$OUT/corpus/part-"
