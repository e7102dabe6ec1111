#!/usr/bin/env bash
# One device call's worth of evidence, written under $OUT (at most 8 files come back).
# Issues #10-#13 (one call each, in this order; see each mode below):
#   scripts/gpu_evidence.sh s25d     ask_segmenter with its timed trial: GPU tests, planning's notes and the wide norm blocks (#11)
#   scripts/gpu_evidence.sh s25c     ask_segmenter: GPU tests, the wide norm blocks side by side, the tier's segmenter notes (#11)
#   scripts/gpu_evidence.sh s25b     ask_segmenter: split_norm_backward's GPU tests; wide norms whole, default and cut (#11)
#   scripts/gpu_evidence.sh s25a     nvFuser's one-kernel schedulers queried per region, against the segments it ran (#11)
#   scripts/gpu_evidence.sh s24a     the stem LayerNorm2d in memory order; the embedding forward's forms (#10, #11)
#   scripts/gpu_evidence.sh s24b     the f32 block norms' inner-persistent heuristics swept by hand (#11)
#   scripts/gpu_evidence.sh s24c     a norm through nvFuser's executor cache against the same heuristic scheduled by hand (#11)
#   scripts/gpu_evidence.sh s24d     kernel tables of blocks and transformer steps still over inductor (#11)
#   scripts/gpu_evidence.sh s24e     (reverted 2701986) float32 attention training with its explicit chain against SDPA (#11)
#   scripts/gpu_evidence.sh s23l     GPU tests of the files the review mend touched
#   scripts/gpu_evidence.sh s23k     the whole GPU suite after session 23's passes
#   scripts/gpu_evidence.sh s23j     regions alone of the forwards still over inductor (#10)
#   scripts/gpu_evidence.sh s23i     kernel tables of the forwards still over inductor on GPU time (#10)
#   scripts/gpu_evidence.sh s23g     the model tier's forwards, five backends interleaved (#10)
#   scripts/gpu_evidence.sh s23h     the model tier's training steps, five backends interleaved (#10)
#   scripts/gpu_evidence.sh s23f     conv_input_layout: GPU tests, stems, ViT kernels and step times (#10)
#   scripts/gpu_evidence.sh s23e     split_transposes: GPU tests, ViT kernels, the tier's forwards interleaved (#10)
#   scripts/gpu_evidence.sh s23d     ViT f32 large: image stems' kernels four ways, regions alone against inductor (#10)
#   scripts/gpu_evidence.sh s23c     sink_permutes: GPU tests, image stems alone, ConvNeXt inference kernels and step times (#10)
#   scripts/gpu_evidence.sh s23b     kernel tables, segments, regions alone of the f32 large inference that loses (#10)
#   scripts/gpu_evidence.sh s23a     #10's fwd_f32_large third of the model tier; ConvNeXt inference GPU span under graphs
#   scripts/gpu_evidence.sh s16d     back-to-back training steps under graphs: which backend or option faults
#   scripts/gpu_evidence.sh s16h     after the slot fix: direct-launch tests with training steps, the five-backend repro, il10
#   scripts/gpu_evidence.sh s16g     plans of the launchers whose outputs differ (debug log)
#   scripts/gpu_evidence.sh s16f     the fault with blocking launches; without scalar constants
#   scripts/gpu_evidence.sh s16e     the llama_train fault with all five backends in one process; inputs watched for writes
#   scripts/gpu_evidence.sh s16c     scalar kernel arguments launched directly; a graph-mode training step's host call tree
#   scripts/gpu_evidence.sh s16b     cProfile of graph replays (nvf_cudagraphs, inductor_ro); ConvNeXt inference host ops and kernels
#   scripts/gpu_evidence.sh s16a     kernel tables and segments of the forwards over inductor (graphs or not); host op tables
#   scripts/gpu_evidence.sh gpu      the whole GPU suite (CUDA graphs, aliasing, kernel cache, shared
#                                    fusions, attention, perf models...), host latency and wrapper cost
#                                    per region, explain() of the LLaMA model (segments per region)
#   scripts/gpu_evidence.sh models 1 perf's model tier, shard 1 of 2 (JSON + log)
#   scripts/gpu_evidence.sh models 2 shard 2 of 2; then, anywhere: python -m perf --report m1.json m2.json --acceptance
#   scripts/gpu_evidence.sh compile  first call per model workload in fresh processes (cold, warm kernel cache)
#   scripts/gpu_evidence.sh blocks   perf's default (block) set against perf/baseline.json, GPU time vs inductor
#   scripts/gpu_evidence.sh dist     on nvidia-h200-x2: DDP and FSDP2 training under torchrun (issue #13)
#   scripts/gpu_evidence.sh suite560 the whole GPU suite alone, with most of a call's 600 s
#   scripts/gpu_evidence.sh il10a/b  issue #10's table in two calls (forwards, training); --from-json joins them
#   scripts/gpu_evidence.sh s20b     kernel overlap: profiler sums against busy time and CUDA events (#11)
#   scripts/gpu_evidence.sh s20c     the block table in interleaved GPU-time rounds, issue #11's block criteria
#   scripts/gpu_evidence.sh s20d     s20c's blocks over inductor: region scoreboards with options swept, dumps (#11)
#   scripts/gpu_evidence.sh s20e     cross-entropy's tail spelled four ways: kernels per call (#11)
#   scripts/gpu_evidence.sh s20g     the loss's sums masked by one mask: tests, tail repro, training kernels (#11)
#   scripts/gpu_evidence.sh s20h     the loss-kernel test; transformer gradients
#   scripts/gpu_evidence.sh s20i     the loss-kernel test; perf model and interleave tests
#   scripts/gpu_evidence.sh s19e     the GPU suite's files after suite560's 560 s; BERT kernels side by side; gradients
#   scripts/gpu_evidence.sh s19d     a norm's weight loaded before its reduction (repro); embedding tests; training kernels (#11)
#   scripts/gpu_evidence.sh s19c     row sums scattered as words: embedding tests, forms, training kernels; then s19b (#11)
#   scripts/gpu_evidence.sh s19b     forward kernel tables against inductor; embedding block and GPT forward regions alone (#11)
#   scripts/gpu_evidence.sh s19a     matmul embedding gradients: tests, the four forms alone, training kernels, gradients (#11)
#   scripts/gpu_evidence.sh s18e     the OpInfo sweep alone, 8 shards (fast math on exp/log regions)
#   scripts/gpu_evidence.sh s18d     var_mean as two sums against Welford on LayerNorm regions, alone against inductor (#11)
#   scripts/gpu_evidence.sh s18c     kernel totals of the other transformer workloads; LLaMA's losing regions swept (#11)
#   scripts/gpu_evidence.sh s18b     hoisted slices and fast math: model kernel totals, their GPU tests, LLaMA's regions (#11)
#   scripts/gpu_evidence.sh s18a     regions of llama/bert training timed alone against inductor; options swept (#11)
#   scripts/gpu_evidence.sh s17a     kernel tables and segments of llama/bert training against inductor (#11)
#   scripts/gpu_evidence.sh il10     issue #10's criteria from interleaved rounds on the small-batch model workloads
#   scripts/gpu_evidence.sh defaults7 the nvFuser wrong-result repro; default backend's gradients on 5 model steps
#   scripts/gpu_evidence.sh suite7   the minimised nvFuser repro, then the GPU suite
#   scripts/gpu_evidence.sh segdump  nvFuser's segments of ConvNeXt's and BERT's training regions (#11)
#   scripts/gpu_evidence.sh s8c      new planning defaults: pass GPU tests, 5 models' gradients, BERT-large kernels
#   scripts/gpu_evidence.sh s8d      atomic embedding gradients: tests, large LM gradients, BERT-large kernels, times
#   scripts/gpu_evidence.sh s8e      CE backward without its one-hot row sum: tests, LM gradients, large-step kernels, times
#   scripts/gpu_evidence.sh s9a      arange as iota, in-place index_add: tests, gradients, kernel tables of losing workloads
#   scripts/gpu_evidence.sh s9b      segments per region and eager ops of the small models that lose GPU time
#   scripts/gpu_evidence.sh s9c      kernel-less segments: which output spellings add them; the cast round trip removed
#   scripts/gpu_evidence.sh rest9    the GPU suite's files after test_gpu_fusion_sharing (suite560 ran out of time)
#   scripts/gpu_evidence.sh s9d      layout rebuilds of ConvNeXt training after the row-major pin was dropped; tests
#   scripts/gpu_evidence.sh s9e      ConvNeXt training after the pin revert; changed tests; the block table (#11)
#   scripts/gpu_evidence.sh s10a     host split of ConvNeXt training; LayerNorm/head kernels per stage; fp32 addmm unfuse
#   scripts/gpu_evidence.sh s10b     permutes hoisted onto region inputs: LayerNorm kernels, tests, gradients, ConvNeXt times
#   scripts/gpu_evidence.sh s10c     ConvNeXt training after hoisting was limited to forward graphs: gradients, tests
#   scripts/gpu_evidence.sh s10d     issue #10's table (5 interleaved rounds), then issue #11's block table
#   scripts/gpu_evidence.sh hostdiag cProfile of vit_fwd host time; nvFuser's own scopes per call/compile (NVFUSER_TRACE)
#   scripts/gpu_evidence.sh il10k    il10 (7 rounds), wrapper cost per region, kernel tables of two forward models
#   scripts/gpu_evidence.sh compile6 first calls (inductor cold, nvf default, cold and warm kernel cache) of 4
#                                    models in fresh processes; wrapper cost per region with paired batches
#   scripts/gpu_evidence.sh s13e     closing: GPU tests of what changed, then the block table (#11)
#   scripts/gpu_evidence.sh s13a     lone_composites_eager: GPU tests, gradients, step and GPU time against it off
#   scripts/gpu_evidence.sh s13b     bert_fwd graph-mode host profile; region host time and forward step time, composites on/off
#   scripts/gpu_evidence.sh s13c     bert_fwd host cProfile, composites on/off; BERT training kernels, atomic embedding grads
#   scripts/gpu_evidence.sh s13d     host cost of a lone GELU: nvFuser region call against ATen's gelu
#   scripts/gpu_evidence.sh s12b     segment_norm_backward: tests, gradients, kernels, compile, step time side by side
#   scripts/gpu_evidence.sh s12a     first-call compile per region, nvFuser's compile scopes; transformer kernel tables
#   scripts/gpu_evidence.sh s11a     grouped-query SDPA and the cut ConvNeXt head backward: tests, gradients, kernels
#   scripts/gpu_evidence.sh s11b     the head-backward sums recomputing the broadcast: gradients, kernels, tests
#   scripts/gpu_evidence.sh rest11   the GPU suite's last files after suite560's 560 s, then the block table
#   scripts/gpu_evidence.sh s11c     grouped-query SDPA against K/V repeated, side by side (kernels, step time)
#   scripts/gpu_evidence.sh blocks11 every block workload, GPU time against inductor, untrimmed, eager (#11)
#   scripts/gpu_evidence.sh blockk   kernel tables and segments of the losing training blocks (#11)
#   scripts/gpu_evidence.sh verify   the GPU suite (440 s), then the bert_train_bf16_large fault repro
#   scripts/gpu_evidence.sh glue     the fused glue (default) against ATen's (nvf_aten_glue) on the
#                                    transformer training steps, graphs or not
#   scripts/gpu_evidence.sh abort    the 25-pair training run that aborted in ~CudaExecutable twice
#   scripts/gpu_evidence.sh decide   GPU split tests; perf.interleave of the opt-in options against the defaults
#   scripts/gpu_evidence.sh kernels  kernel tables (nvf_bookend, inductor) of bert/llama training; abort bisection
# Earlier issues:
#   scripts/gpu_evidence.sh tests   GPU test suite, explain() reports, host latency, OpInfo sweep
#   scripts/gpu_evidence.sh perf    perf/ default set, untrimmed-vs-trimmed checks, the expand rule
#   scripts/gpu_evidence.sh final   run 2 against perf/baseline.json, live untrimmed check, explain, suite
#   scripts/gpu_evidence.sh suite   GPU suite beside the sharded OpInfo sweep
#   scripts/gpu_evidence.sh check   embedding fused vs ATen, live untrimmed check, --quick wall time, suite
#   scripts/gpu_evidence.sh confirm metadata programs and embedding, --quick vs baseline, explain, suite
# Run from the repo root after: source .gpu/nvf_setup.sh (and, for the OpInfo sweep, the expecttest
# wheel carried in .whl/ on PYTHONPATH).
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

explain_reports() {  # explain() printed on the GPU for seed 001 and for a GPT-style block
  timeout 60 python3 tests/gpu_explain_runs.py seed001 > "$OUT/explain_seed001.txt" 2>&1
  timeout 90 python3 tests/gpu_explain_runs.py gpt_block > "$OUT/explain_gpt_block.txt" 2>&1
}

untrimmed_live() {  # bookend=False checked live (with re-measurement) against the trimmed baseline
  timeout 90 python3 -m perf --only gpt_attention_fwd_bf16,gpt_mlp_fwd_bf16,metadata_only --backends nvf_untrimmed \
    --baseline perf/baseline.json --compare-backend nvf_untrimmed --baseline-backend nvf_bookend \
    --json /tmp/untrimmed_live.json > "$OUT/untrimmed_live.log" 2>&1; echo "untrimmed live rc=$?"
}
gradients() {  # perf.grad_check of WORKLOADS under BACKENDS within TIMEOUT s: $OUT/grad.txt and its summary
  timeout "$3" python3 -m perf.grad_check "$1" "$2" > "$OUT/grad.txt" 2>&1; echo "grad rc=$?"
  grep -E "within|FAIL|fell back|runs in eager" "$OUT/grad.txt" | cut -c1-200 | head -12
}

opinfo_shards() {  # SHARDS SECONDS: the OpInfo sweep in SHARDS background processes (then `wait`)
  mkdir -p /tmp/opinfo
  for i in $(seq 0 $(($1 - 1))); do
    NVF_OPINFO_SHARD="$i/$1" NVF_OPINFO_BUDGET_S=$(($2 - 60)) NVF_OPINFO_REPORT="/tmp/opinfo/shard$i.txt" \
      timeout $(($2 - 10)) python3 -m pytest -q tests/test_gpu_opinfo.py -p no:cacheprovider --tb=line \
      > "/tmp/opinfo/pytest$i.log" 2>&1 &
  done
}
opinfo_merge() {  # the shards' tables as one: $OUT/opinfo.txt, and their pytest tails
  python3 scripts/merge_opinfo.py /tmp/opinfo/shard*.txt.json > "$OUT/opinfo.txt" 2>&1
  tail -n 3 /tmp/opinfo/pytest*.log > "$OUT/opinfo_pytest.log"
}

kernel_table() {  # scripts/block_kernels.py WORKLOAD BACKEND appended to $OUT/kernels.txt; prints its total
  echo "=== $1 $2" >> "$OUT/kernels.txt"
  timeout 90 python3 scripts/block_kernels.py "$1" "$2" 2>&1 | grep -v "_warn_once\|UserWarning" >> "$OUT/kernels.txt"
  echo "$1 $2: $(grep -E "TOTAL" "$OUT/kernels.txt" | tail -n 1)"
}
kernel_files() {  # SECONDS "WORKLOADS" "BACKENDS": scripts/block_kernels.py per pair to $OUT/k_W_B.txt; prints totals
  local w b f
  for w in $2; do for b in $3; do
    f="$OUT/k_${w}_${b}.txt"
    timeout "$1" python3 scripts/block_kernels.py $w $b > "$f" 2>&1; echo "$w $b rc=$?: $(grep TOTAL "$f" | cut -c1-120)"
  done; done
}
pack_kernels() {  # the k_*.txt tables of kernel_files into $OUT/kernels.tgz
  tar czf "$OUT/kernels.tgz" -C "$OUT" $(cd "$OUT" && ls k_*.txt) && rm -f "$OUT"/k_*.txt
}
region_compile() {  # first call of WORKLOAD under BACKEND in a fresh process, regions' compiles to FILE; its RESULT line
  TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$4" python3 scripts/compile_times.py --child "$1" "$2" \
    --regions "$3" 2>&1 | grep RESULT | cut -c1-400
}
direct_tests() {  # pytest (markers "gpu or not gpu") of the given files within $1 s: $OUT/tests.log and its summary
  local limit=$1; shift
  timeout "$limit" python3 -m pytest -q -m "gpu or not gpu" "$@" -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"; grep -E "^FAILED|^ERROR|^E  " "$OUT/tests.log" | head -n 30
}
IL10_WORKLOADS=llama_fwd_bf16_small,gpt_fwd_bf16_small,bert_fwd_bf16_small,vit_fwd_bf16_small,convnext_fwd_bf16_small,llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small
IL10_FWD=llama_fwd_bf16_small,gpt_fwd_bf16_small,bert_fwd_bf16_small,vit_fwd_bf16_small,convnext_fwd_bf16_small
IL10_FWD_LARGE=llama_fwd_f32_large,gpt_fwd_f32_large,bert_fwd_f32_large,vit_fwd_f32_large,convnext_fwd_f32_large
IL10_TRAIN=llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small
il10_half() {  # NAME WORKLOADS: perf.interleave of five backends in the call's time left, $OUT/NAME.json
  timeout $((590 - SECONDS)) python3 -m perf.interleave "$2" \
    --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds ${IL10_ROUNDS:-9} --acceptance \
    --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1; echo "$1 rc=$?"
  grep -E "^\| [a-z]" "$OUT/$1.log" | tail -n 25 | cut -c1-170
}
il10_graphs() {  # NAME WORKLOADS: perf.interleave of the two CUDA-graph backends in the call's time left
  timeout $((590 - SECONDS)) python3 -m perf.interleave "$2" \
    --backends inductor_ro,nvf_cudagraphs --rounds ${IL10_ROUNDS:-5} \
    --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1; echo "$1 rc=$?"
  grep -E "^\| [a-z]" "$OUT/$1.log" | tail -n 12 | cut -c1-170
}
il10_table() {  # issue #10's acceptance table, interleaved rounds, with nvf_fec_execute (direct launch off) beside the default
  timeout $((590 - SECONDS)) python3 -m perf.interleave "$IL10_WORKLOADS" \
    --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs,nvf_fec_execute --rounds ${IL10_ROUNDS:-7} --acceptance \
    --json "$OUT/il10.json" > "$OUT/il10.log" 2>&1; echo "il10 rc=$?"
  sed -n '/^### Acceptance/,$p' "$OUT/il10.log"; grep -E "nvf_fec_execute|nvf_bookend " "$OUT/il10.log" | cut -c1-140 | head -n 20
}
direct_cost() {  # scripts/direct_launch_cost.py on $DLC_WORKLOADS (default $1), $DLC_ROUNDS rounds (default $2)
  timeout $((585 - SECONDS)) python3 scripts/direct_launch_cost.py ${DLC_WORKLOADS:-$1} --rounds ${DLC_ROUNDS:-$2} \
    > "$OUT/cost.txt" 2>&1; echo "cost rc=$?"
  grep -E "^===|step wall|^  nvf_region" "$OUT/cost.txt" | cut -c1-160
}
case "${1:-tests}" in
  gpu)
    timeout 330 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfs \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    timeout 120 python3 scripts/host_latency.py > "$OUT/host_latency.log" 2>&1; echo "host latency rc=$?"
    timeout 60 python3 tests/gpu_explain_runs.py llama > "$OUT/explain_llama.txt" 2>&1; echo "explain rc=$?"
    tail -n 3 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -30
    cat "$OUT/host_latency.log"; grep -E "^-- nvf_region|^nvFuser segments|^CUDA graph" "$OUT/explain_llama.txt" | head -60
    echo "elapsed ${SECONDS}s"
    ;;
  models)
    shard="${2:-1}"
    timeout 590 python3 -m perf --tag model --shard "$shard/2" --time-budget 530 --json "$OUT/model-$shard.json" \
      > "$OUT/model-$shard.log" 2>&1; echo "models shard $shard rc=$?"; tail -n 60 "$OUT/model-$shard.log"
    ;;
  compile)
    timeout 580 python3 scripts/compile_times.py --json "$OUT/compile_times.json" 2>&1 | tee "$OUT/compile_times.log"
    ;;
  dist)
    # On nvidia-h200-x2 (issue #13): DDP, FSDP2 per block and FSDP2 whole model, 20 bf16 steps, large batch.
    python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
    timeout -s INT 380 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m perf.distributed \
      --model llama --wrappers ddp,fsdp2,fsdp2-model --backends eager,inductor,nvf_bookend --steps 20 \
      --dtype bf16 --batch large --json "$OUT/distributed_bf16_large.json" --check 2>&1 \
      | grep -v "Profiler record" | tee "$OUT/distributed_bf16_large.log"
    timeout 180 python3 -m pytest -q -m gpu tests/test_gpu_distributed.py -rs 2>&1 | tee "$OUT/gpu_distributed_tests.log"
    ;;
  suite560)
    timeout 560 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfs --durations=15 \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 25 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -30
    ;;
  suite_par)
    # The GPU suite (OpInfo sweep aside) in three pytest processes at once, files dealt round-robin by
    # size (one GPU, 16 cores: nvFuser's compiles are the bottleneck); each process's log, then totals.
    mapfile -t files < <(ls -S tests/test_*.py)
    for g in 0 1 2; do
      group=(); for i in "${!files[@]}"; do [ $((i % 3)) -eq $g ] && group+=("${files[$i]}"); done
      timeout ${SUITE_S:-540} python3 -m pytest -q -m gpu "${group[@]}" -p no:cacheprovider --tb=short -rfs \
        --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests_$g.log" 2>&1 &
    done
    wait
    for g in 0 1 2; do echo "group $g: $(tail -n 1 "$OUT/gpu_tests_$g.log")"; done
    grep -h -E "^FAILED|^ERROR" "$OUT"/gpu_tests_*.log | head -30
    echo "elapsed ${SECONDS}s"
    ;;
  verify)
    # The GPU suite under the current defaults, then the BERT training fault's repro (it must run clean).
    timeout 440 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfs --durations=10 \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 18 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -30
    timeout 120 python3 scripts/fallback_repro.py bert_train_bf16_large > "$OUT/repro_bert_large.log" 2>&1
    echo "bert_train_bf16_large repro rc=$?"; grep -E "^## |^warning|Error" "$OUT/repro_bert_large.log" | cut -c1-300 | head -12
    echo "elapsed ${SECONDS}s"
    ;;
  il10k)
    IL10_ROUNDS=${IL10_ROUNDS:-7} OUT="$OUT" bash "$0" il10
    timeout 90 python3 scripts/host_latency.py --only regions > "$OUT/host_regions.log" 2>&1; echo "host regions rc=$?"
    tail -n 8 "$OUT/host_regions.log"
    for w in llama_fwd_bf16_small gpt_fwd_bf16_small; do for b in nvf_bookend inductor; do
      timeout 60 python3 scripts/block_kernels.py $w $b > "$OUT/k_${w}_$b.txt" 2>&1; echo "$w $b: $(tail -n 1 "$OUT/k_${w}_$b.txt")"
    done; done
    echo "elapsed ${SECONDS}s"
    ;;
  compile6)
    timeout 90 python3 scripts/host_latency.py --only regions --batches 30 > "$OUT/host_regions.log" 2>&1; echo "host regions rc=$?"
    tail -n 18 "$OUT/host_regions.log"
    timeout 470 python3 scripts/compile_times.py --only ${COMPILE_ONLY:-bert_train_bf16_small,vit_train_bf16_small,gpt_train_bf16_small,llama_fwd_bf16_small} \
      --json "$OUT/compile_times.json" 2>&1 | tee "$OUT/compile_times.log"
    echo "elapsed ${SECONDS}s"
    ;;
  il10)
    # Issue #10's criteria from interleaved rounds (perf.interleave --acceptance) on the host-bound
    # (small-batch) model workloads, where pair-after-pair step times carry the host's drift.
    timeout 585 python3 -m perf.interleave \
      ${IL10_WORKLOADS:-llama_fwd_bf16_small,gpt_fwd_bf16_small,bert_fwd_bf16_small,vit_fwd_bf16_small,convnext_fwd_bf16_small,llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small} \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds ${IL10_ROUNDS:-9} --acceptance \
      --json "$OUT/il10.json" > "$OUT/il10.log" 2>&1; echo "il10 rc=$?"
    sed -n '/^### Acceptance/,$p' "$OUT/il10.log"; grep -c "^| " "$OUT/il10.log"
    ;;
  drift)
    # Why vit_fwd_bf16_small/nvf_bookend stepped at 1.18 ms late in a model-tier process and at
    # 0.63 ms in a fresh one: alone; after two training models (profiled, then not); interleaved.
    P="python3 -m perf --only"
    timeout 90 $P vit_fwd_bf16_small --backends eager,inductor,nvf_bookend --json /tmp/d1.json > "$OUT/drift1.log" 2>&1
    echo "alone rc=$?"; grep -E "^\[" "$OUT/drift1.log" | cut -c1-160
    timeout 150 $P llama_train_bf16_small,bert_train_bf16_small,vit_fwd_bf16_small --backends nvf_bookend \
      --json /tmp/d2.json > "$OUT/drift2.log" 2>&1; echo "after two, profiled rc=$?"; grep -E "^\[" "$OUT/drift2.log" | cut -c1-160
    timeout 150 $P llama_train_bf16_small,bert_train_bf16_small,vit_fwd_bf16_small --backends nvf_bookend --no-profile \
      --json /tmp/d3.json > "$OUT/drift3.log" 2>&1; echo "after two, no profile rc=$?"; grep -E "^\[" "$OUT/drift3.log" | cut -c1-160
    timeout 90 python3 -m perf.interleave vit_fwd_bf16_small --backends inductor,nvf_bookend,eager \
      > "$OUT/drift_il.log" 2>&1; echo "interleaved rc=$?"; tail -n 8 "$OUT/drift_il.log"
    echo "elapsed ${SECONDS}s"
    ;;
  defaults7)
    # Session 7: the nvFuser wrong-result repro (standalone); the default backend's loss and gradients
    # on every small bf16 model training step, without and with CUDA graphs.
    timeout 120 python3 scripts/repros/nvfuser_convnext_head_backward.py > "$OUT/repro_head.txt" 2>&1
    echo "repro rc=$?"; grep -v Warning "$OUT/repro_head.txt" | tail -n 8
    timeout 400 python3 -m perf.grad_check llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small \
      nvf_bookend > "$OUT/grad_default.txt" 2>&1; echo "grad default rc=$?"; grep -E "within|FAIL|fell back|grad check" "$OUT/grad_default.txt" | head -30
    echo "elapsed ${SECONDS}s"
    ;;
  suite7)
    # Session 7: the minimised nvFuser repro, then the whole GPU suite under the current defaults.
    timeout 60 python3 scripts/repros/nvfuser_convnext_head_backward.py > "$OUT/repro_head.txt" 2>&1
    echo "repro rc=$?"; grep -E "^outputs|^minimal" "$OUT/repro_head.txt"
    timeout 520 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfs --durations=10 \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 16 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -30
    echo "elapsed ${SECONDS}s"
    ;;
  segdump)
    # Session 7, issue #11: nvFuser's segments of ConvNeXt's and BERT's training regions (definition,
    # schedulers, which expressions went to which segment).
    for w in ${SEGDUMP_WORKLOADS:-convnext_train_bf16_small bert_train_bf16_small}; do
      timeout 200 python3 scripts/region_segments_dump.py $w > "$OUT/segdump_$w.txt" 2>&1; echo "$w rc=$?"
      grep "^== " "$OUT/segdump_$w.txt" | head -40
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s8c)
    # Session 8, call 3: the new planning defaults (unflatten on; unpermute + split under graphs and
    # from 16384 rows): GPU tests of the passes, gradients of all five training steps, graphs or not;
    # then kernel tables of BERT's large training step (nvf_bookend 1.23x inductor's GPU time, #11).
    timeout 200 python3 -m pytest -q -m gpu tests/test_unpermute_reductions.py tests/test_unflatten_reductions.py \
      tests/test_split_norm_backward.py tests/test_gpu_model_grads.py -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; tail -n 3 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 200 python3 -m perf.grad_check llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small \
      nvf_bookend --show-regions > "$OUT/grad_defaults.txt" 2>&1
    echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check|nvf_region" "$OUT/grad_defaults.txt" | cut -c1-200 | head -30
    timeout 130 python3 -m perf.grad_check convnext_train_bf16_small,bert_train_bf16_small nvf_cudagraphs --show-regions \
      > "$OUT/grad_graphs.txt" 2>&1
    echo "grad graphs rc=$?"; grep -E "within|FAIL|fell back|grad check|nvf_region" "$OUT/grad_graphs.txt" | cut -c1-200 | head -30
    for be in nvf_bookend inductor; do
      timeout 60 python3 scripts/block_kernels.py bert_train_bf16_large $be > "$OUT/kernels_bert_large_$be.txt" 2>&1
      echo "kernels $be rc=$?"; tail -n 1 "$OUT/kernels_bert_large_$be.txt"
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s8d)
    # Session 8, call 4: embedding gradients as atomic adds (atomic_embedding_backward) and the bf16
    # test fix; gradients of the large LM training steps (4096 tokens: ATen sorted them before);
    # BERT-large kernels by default and with every norm backward split; step and GPU time against
    # session 7's planning defaults.
    timeout 120 python3 -m pytest -q -m gpu tests/test_embedding_backward.py tests/test_split_norm_backward.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 150 python3 -m perf.grad_check bert_train_bf16_large,llama_train_bf16_large nvf_bookend --show-regions \
      > "$OUT/grad_large.txt" 2>&1; echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check|nvf_region" "$OUT/grad_large.txt" | cut -c1-200 | head
    for be in nvf_bookend nvf_split_norm_bwd; do
      timeout 60 python3 scripts/block_kernels.py bert_train_bf16_large $be > "$OUT/kernels_bert_large_$be.txt" 2>&1
      echo "kernels $be rc=$?"; tail -n 1 "$OUT/kernels_bert_large_$be.txt"
    done
    timeout 200 python3 -m perf.interleave bert_train_bf16_large,llama_train_bf16_large,gpt_train_bf16_large \
      --backends inductor,nvf_bookend,nvf_session7 --rounds 2 --json "$OUT/il_large.json" > "$OUT/il_large.log" 2>&1
    echo "il rc=$?"; grep -E "^\| (bert|llama|gpt)" "$OUT/il_large.log" | head -9
    echo "elapsed ${SECONDS}s"
    ;;
  s8e)
    # Session 8, call 5: cross-entropy's backward without its one-hot row sum (joint-graph pass):
    # GPU tests, gradients of the LM training steps, kernels of BERT's and LLaMA's large steps, times.
    timeout 100 python3 -m pytest -q -m gpu tests/test_cross_entropy.py tests/test_one_hot_sums.py tests/test_embedding_backward.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 170 python3 -m perf.grad_check llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,bert_train_bf16_large \
      nvf_bookend --show-regions > "$OUT/grad.txt" 2>&1; echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check|nvf_region" "$OUT/grad.txt" | cut -c1-200 | head
    for run in "bert_train_bf16_large nvf_bookend" "llama_train_bf16_large nvf_bookend" "llama_train_bf16_large inductor"; do
      set -- $run
      timeout 60 python3 scripts/block_kernels.py $1 $2 > "$OUT/kernels_$1_$2.txt" 2>&1
      echo "kernels $run rc=$?"; tail -n 1 "$OUT/kernels_$1_$2.txt"
    done
    timeout 170 python3 -m perf.interleave bert_train_bf16_large,llama_train_bf16_large,gpt_train_bf16_large \
      --backends inductor,nvf_bookend --rounds 2 --json "$OUT/il_large.json" > "$OUT/il_large.log" 2>&1
    echo "il rc=$?"; grep -E "^\| (bert|llama|gpt)" "$OUT/il_large.log" | head -9
    echo "elapsed ${SECONDS}s"
    ;;
  s9a)
    # Session 9, call 1: arange as iota, index_add in place, the gather split: GPU tests, gradients,
    # the large LLaMA step's kernels; kernel tables of the small workloads that lose GPU time (#10, #11).
    timeout 120 python3 -m pytest -q -m gpu tests/test_cross_entropy.py tests/test_one_hot_sums.py tests/test_embedding_backward.py \
      tests/test_embedding_saved_rows.py -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 120 python3 -m perf.grad_check llama_train_bf16_large,bert_train_bf16_small nvf_bookend > "$OUT/grad.txt" 2>&1
    echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check" "$OUT/grad.txt" | cut -c1-200 | head
    for run in "llama_train_bf16_large nvf_bookend" "bert_train_bf16_small nvf_bookend" "bert_train_bf16_small inductor" \
               "convnext_fwd_bf16_small nvf_bookend" "convnext_fwd_bf16_small inductor" "bert_fwd_bf16_small nvf_bookend" \
               "bert_fwd_bf16_small inductor" "llama_fwd_bf16_small nvf_bookend" "llama_fwd_bf16_small inductor"; do
      set -- $run
      timeout 60 python3 scripts/block_kernels.py $1 $2 > "$OUT/k_$1_$2.txt" 2>&1
      echo "kernels $run rc=$? ${SECONDS}s"; tail -n 1 "$OUT/k_$1_$2.txt"
      [ $SECONDS -gt 540 ] && break
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s9b)
    # Session 9, call 2: where small models' GPU time goes: nvFuser's segments per region (explain),
    # the ATen ops behind ConvNeXt's eager kernels, the large LLaMA step's kernels.
    for run in "llama_train_bf16_large nvf_bookend" "convnext_fwd_bf16_small nvf_bookend:ops" "convnext_fwd_bf16_small explain" \
               "llama_fwd_bf16_small explain" "bert_train_bf16_small explain" "llama_fwd_bf16_small nvf_bookend"; do
      set -- $run
      echo "=== $run" >> "$OUT/kernels.txt"
      timeout 90 python3 scripts/block_kernels.py $1 $2 > /tmp/k.txt 2>&1
      echo "kernels $run rc=$? ${SECONDS}s"; tail -n 1 /tmp/k.txt; grep -v "_warn_once\|UserWarning" /tmp/k.txt >> "$OUT/kernels.txt"
      [ $SECONDS -gt 540 ] && break
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s9c)
    # Session 9, call 3: which output spellings add nvFuser's kernel-less segments (and their host
    # cost); the cast round trip removed: tests of lowering and aliasing, segments of two models.
    timeout 120 python3 scripts/repros/alias_segments.py > "$OUT/alias_segments.txt" 2>&1; echo "alias rc=$?"
    cat "$OUT/alias_segments.txt" | grep -v Warn | tail -14
    timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_backend.py tests/test_output_aliasing.py tests/test_cross_entropy.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    for run in "convnext_fwd_bf16_small explain" "llama_fwd_bf16_small explain"; do
      set -- $run
      echo "=== $run" >> "$OUT/kernels.txt"
      timeout 90 python3 scripts/block_kernels.py $1 $2 > /tmp/k.txt 2>&1
      echo "kernels $run rc=$? ${SECONDS}s"; grep -v "_warn_once\|UserWarning" /tmp/k.txt >> "$OUT/kernels.txt"
      grep -c "no kernel" /tmp/k.txt
    done
    echo "elapsed ${SECONDS}s"
    ;;
  rest9)
    # Session 9: the GPU suite's last files (suite560 ran out of time after test_gpu_fusion_sharing).
    timeout 560 python3 -m pytest -q -m gpu tests/test_gpu_explain.py::test_channels_last_layer_norm_region_is_one_kernel_without_a_cast_round_trip \
      tests/test_gpu_kernel_cache.py tests/test_gpu_model_grads.py tests/test_gpu_stability.py tests/test_lean_views.py \
      tests/test_notebook.py tests/test_one_hot_sums.py tests/test_output_aliasing.py tests/test_perf_models.py \
      tests/test_split_norm_backward.py tests/test_training_extras.py tests/test_unflatten_reductions.py \
      tests/test_unpermute_reductions.py tests/test_verify_regions.py tests/test_embedding_backward.py tests/test_embedding_saved_rows.py tests/test_gqa_attention.py \
      -p no:cacheprovider --tb=short -rfs --durations=8 > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 15 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -30
    ;;
  s9d)
    # Session 9: layout rebuilds after the row-major pin was dropped: ConvNeXt training's regions
    # whose first run was misplaced, and its kernels (147 before, 164 in call 6); tests; blocks.
    export BLOCK_KERNELS_REBUILDS=1
    for run in "convnext_train_bf16_small nvf_bookend" "convnext_train_bf16_small nvf_bookend:ops"; do
      set -- $run
      echo "=== $run" >> "$OUT/kernels.txt"
      timeout 120 python3 scripts/block_kernels.py $1 $2 > /tmp/k.txt 2>&1
      echo "kernels $run rc=$? ${SECONDS}s"; grep -v "_warn_once\|UserWarning" /tmp/k.txt >> "$OUT/kernels.txt"
      grep -E "TOTAL|rebuild|copied per call|written by" /tmp/k.txt | cut -c1-160 | head -20
    done
    unset BLOCK_KERNELS_REBUILDS
    timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_backend.py tests/test_output_aliasing.py tests/test_lean_views.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 100 python3 -m perf.grad_check convnext_train_bf16_small nvf_bookend > "$OUT/grad.txt" 2>&1
    echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check" "$OUT/grad.txt" | cut -c1-200 | head -4
    echo "elapsed ${SECONDS}s"
    ;;
  s10b)
    # Session 10, call 3: permutes hoisted onto region inputs (ConvNeXt's channels-last LayerNorms
    # read the NHWC view) and the float32 addmm unfuse: LayerNorm kernels per stage, GPU tests,
    # gradients, ConvNeXt kernel tables, ConvNeXt step times interleaved.
    timeout 150 python3 scripts/repros/ln_shapes.py > "$OUT/ln_shapes.txt" 2>&1; echo "ln rc=$?"
    grep -v "Warn\|warn" "$OUT/ln_shapes.txt" | tail -n 10
    timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_explain.py tests/test_gpu_model_grads.py -p no:cacheprovider --tb=short -rfs \
      > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 200 python3 -m perf.grad_check convnext_train_bf16_small,convnext_train_f32_small,gpt_train_f32_small nvf_bookend \
      > "$OUT/grad.txt" 2>&1; echo "grad rc=$?"; grep -E "within|FAIL|fell back|runs in eager" "$OUT/grad.txt" | cut -c1-200 | head -8
    for wl in convnext_fwd_bf16_small convnext_train_bf16_small; do
      echo "=== $wl" >> "$OUT/kernels.txt"
      timeout 90 python3 scripts/block_kernels.py $wl nvf_bookend 2>&1 | grep -v "_warn_once\|UserWarning" >> "$OUT/kernels.txt"
      grep -E "TOTAL" "$OUT/kernels.txt" | tail -n 1
    done
    timeout 240 python3 -m perf.interleave convnext_fwd_bf16_small,convnext_train_bf16_small \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds 3 --acceptance \
      --json "$OUT/il_cnx.json" > "$OUT/il_cnx.log" 2>&1; echo "il rc=$?"
    sed -n '/^### Acceptance/,/^$/p' "$OUT/il_cnx.log" | head -8; grep "GPU kernel" -A0 "$OUT/il_cnx.log" | head -2
    grep -E "convnext.*(nvf_bookend|inductor |nvf_cudagraphs|inductor_ro)" "$OUT/il_cnx.log" | tail -n 8
    echo "elapsed ${SECONDS}s"
    ;;
  s11c)
    # Session 11: grouped-query SDPA against K/V repeated (nvf_repeat_kv), side by side: kernels and GPU
    # time per step, then step time interleaved; the GQA GPU test on the final code.
    timeout 120 python3 -m pytest -q -m gpu tests/test_gqa_attention.py -p no:cacheprovider --tb=short -rfs \
      > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"
    for wl in llama_fwd_bf16_small llama_train_bf16_small; do
      for b in nvf_bookend nvf_repeat_kv; do kernel_table $wl $b; done
    done
    timeout $((560 - SECONDS)) python3 -m perf.interleave llama_fwd_bf16_small,llama_train_bf16_small \
      --backends nvf_repeat_kv,nvf_bookend,inductor --rounds 5 --json "$OUT/il_gqa.json" > "$OUT/il_gqa.log" 2>&1
    echo "il rc=$?"; grep -E "^\| llama" "$OUT/il_gqa.log" | tail -n 6; echo "elapsed ${SECONDS}s"
    ;;
  s12a)
    # Session 12: where a training step's first call goes, region by region (nvFuser's profiler on the
    # first call: each region's compile against its kernels' own compile times), nvFuser's scopes of
    # the compiling calls (NVFUSER_TRACE), then kernel tables of the transformer steps that lose GPU
    # time to inductor (#11).
    for wl in llama_train_bf16_small bert_train_bf16_small; do
      region_compile $wl nvf_default "$OUT/regions_$wl.txt" 150
      tail -n 1 "$OUT/regions_$wl.txt"
    done
    timeout 150 python3 scripts/nvf_trace.py llama_train_bf16_small --steady 2 --top 30 > "$OUT/trace_llama_train.txt" 2>&1
    echo "trace rc=$?"
    for wl in bert_train_bf16_small bert_fwd_bf16_small gpt_fwd_bf16_small; do
      for b in nvf_bookend inductor; do kernel_table $wl $b; done
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s13e)
    # Session 13, closing: the GPU tests of what changed (composites, embedding gradients, attention's
    # shared tensor_val), then issue #11's block table in the time left.
    timeout 240 python3 -m pytest -q -m gpu tests/test_composites.py tests/test_embedding_backward.py \
      tests/test_embedding_saved_rows.py tests/test_attention.py tests/test_gqa_attention.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log"
    timeout $((585 - SECONDS)) python3 -m perf --all --tag block --backends inductor,nvf_bookend,nvf_untrimmed,eager --no-host \
      --time-budget $((560 - SECONDS)) --json "$OUT/blocks13.json" > "$OUT/blocks13.log" 2>&1; echo "blocks13 rc=$?"
    tail -n 8 "$OUT/blocks13.log"; echo "elapsed ${SECONDS}s"
    ;;
  s16a)
    # Session 16, diagnosis: kernel tables (inductor against nvf_bookend) and nvFuser's segments of the
    # forwards whose graph-mode step time is over inductor_ro (#10, #11); host op tables of the
    # forwards whose step time without graphs is over inductor's.
    for w in ${S16_KERNEL_WORKLOADS:-llama_fwd_bf16_small bert_fwd_bf16_small gpt_fwd_bf16_small}; do for b in nvf_bookend inductor explain; do
      timeout 90 python3 scripts/block_kernels.py $w $b > "$OUT/k_${w}_$b.txt" 2>&1; echo "$w $b rc=$?: $(tail -n 1 "$OUT/k_${w}_$b.txt" | cut -c1-120)"
    done; done
    for w in ${S16_HOST_WORKLOADS:-gpt_fwd_bf16_small convnext_fwd_bf16_small}; do for b in nvf_bookend inductor; do
      timeout 90 python3 scripts/step_host_split.py $w --backend $b --steps 60 --ops > "$OUT/split_${w}_$b.txt" 2>&1
      echo "$w $b rc=$?"; grep -E "^step wall|^region calls" "$OUT/split_${w}_$b.txt"
    done; done
    echo "elapsed ${SECONDS}s"
    ;;
  s16d)
    # Session 16: llama_train_bf16_small faulted (an ATen gather's index out of bounds) in perf.interleave
    # once each backend ran ~200 back-to-back steps: which backend, alone or beside inductor_ro, and
    # which option removes it. One process per case (a device assert kills the context).
    w=${S16_WORKLOAD:-llama_train_bf16_small}
    run_case() {  # name, then scripts/graph_steps_repro.py arguments
      local name=$1; shift
      timeout 120 python3 scripts/graph_steps_repro.py $w "$@" > "/tmp/case_$name.txt" 2>&1
      echo "== $name rc=$?: $(grep -E '^OK|^FAULT' /tmp/case_$name.txt | head -n 1)"
    }
    run_case graphs nvf_cudagraphs --steps 300
    run_case inductor_ro inductor_ro --steps 300
    run_case both inductor_ro,nvf_cudagraphs --steps 200
    run_case nographs nvf_bookend --steps 100
    if grep -q "^FAULT" /tmp/case_graphs.txt /tmp/case_both.txt; then
      for opt in fuse_embedding=false atomic_embedding_backward=false fuse_cross_entropy=false fuse_data_movement=false; do
        run_case "graphs_$opt" nvf_cudagraphs --steps 300 --option $opt
      done
    fi
    for f in /tmp/case_*.txt; do echo "#### $f"; grep -v "IndexKernelUtils" "$f" | tail -n 40; done > "$OUT/cases.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s16e)
    # Session 16: the llama_train fault of perf.interleave, in its own setting: the five backends in one
    # process, inputs and parameters watched for writes; then perf.interleave itself, and with
    # nvf_fec_execute (direct launch off) in place of nvf_bookend if it faults.
    w=${S16_WORKLOAD:-llama_train_bf16_small}
    timeout 200 python3 scripts/graph_steps_repro.py $w eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --steps 100 --rounds 3 \
      > "$OUT/five.txt" 2>&1; echo "five rc=$?"; grep -E "^OK|^FAULT|^CHANGED" "$OUT/five.txt" | head -n 12
    for b in nvf_bookend nvf_fec_execute; do
      timeout 150 python3 -m perf.interleave $w --backends eager,inductor,inductor_ro,$b,nvf_cudagraphs --rounds 9 \
        > "$OUT/il_$b.txt" 2>&1; rc=$?; echo "interleave with $b rc=$rc"; grep -E "^\| $w" "$OUT/il_$b.txt" | tail -n 5 | cut -c1-160
      grep -q "device-side assert\|AcceleratorError" "$OUT/il_$b.txt" && echo "FAULT with $b" || break
    done
    for f in "$OUT"/il_*.txt; do grep -v "IndexKernelUtils" "$f" | tail -n 30 > "$f.short"; mv "$f.short" "$f"; done
    echo "elapsed ${SECONDS}s"
    ;;
  s16f)
    # Session 16: which direct launch faults beside the other backends (blocking launches, dynamo_nvf's
    # debug log of each launcher and the scalars it keeps), and whether it does without scalar constants.
    w=${S16_WORKLOAD:-llama_train_bf16_small}
    CUDA_LAUNCH_BLOCKING=1 timeout 200 python3 scripts/graph_steps_repro.py $w eager,inductor,inductor_ro,nvf_bookend --steps 20 --rounds 1 \
      --log DEBUG > "$OUT/blocking.txt" 2>&1; echo "blocking rc=$?"; grep -E "^OK|^FAULT|^CHANGED" "$OUT/blocking.txt" | head -n 5
    grep -E "launch failed|launcher failed|cuLaunch|CUresult" "$OUT/blocking.txt" | cut -c1-300 | head -n 10
    DYNAMO_NVF_DEBUG_NO_SCALARS=1 timeout 200 python3 scripts/graph_steps_repro.py $w eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs \
      --steps 100 --rounds 2 > "$OUT/noscalars.txt" 2>&1; echo "no scalars rc=$?"; grep -E "^OK|^FAULT|^CHANGED" "$OUT/noscalars.txt" | head -n 5
    grep -v IndexKernelUtils "$OUT/blocking.txt" | grep -E "keeps|direct \(|fec.execute \(|launch|FAULT|Error" | cut -c1-400 > "$OUT/blocking_short.txt"; rm -f "$OUT/blocking.txt"
    grep -v IndexKernelUtils "$OUT/noscalars.txt" | tail -n 30 > "$OUT/noscalars_short.txt"; rm -f "$OUT/noscalars.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s17a)
    # Session 17, #11: kernel tables (nvf_bookend against inductor) and nvFuser's segments of the model
    # steps whose GPU time is over inductor's (llama_train 0.327 against 0.311 ms, bert_train, bert_fwd).
    for w in ${S17_KERNEL_WORKLOADS:-llama_train_bf16_small bert_train_bf16_small}; do for b in nvf_bookend inductor explain nvf_bookend:ops; do
      f="$OUT/k_${w}_${b/:/_}.txt"
      timeout 120 python3 scripts/block_kernels.py $w $b > "$f" 2>&1; echo "$w $b rc=$?: $(grep TOTAL "$f" | cut -c1-120)"
    done; done
    echo "elapsed ${SECONDS}s"
    ;;
  s17b)
    # Session 17: the mean's count in float32 (decompositions._count): the cross-entropy tests and the
    # GPU suite's files suite560 did not reach; then the LM training steps' kernel totals and the
    # cross-entropy region's segments.
    timeout 320 python3 -m pytest -q -m gpu tests/test_cross_entropy.py "tests/test_gpu_backend.py::test_a_mean_cross_entropy_forward_is_two_kernels" \
      tests/test_output_aliasing.py tests/test_perf_models.py tests/test_split_norm_backward.py tests/test_training_extras.py \
      tests/test_unflatten_reductions.py tests/test_unpermute_reductions.py tests/test_verify_regions.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 3 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR|^E  " "$OUT/gpu_tests.log" | head -20
    for w in llama_train_bf16_small bert_train_bf16_small gpt_train_bf16_small; do
      timeout 100 python3 scripts/block_kernels.py $w nvf_bookend > "$OUT/k_$w.txt" 2>&1; echo "$w rc=$?: $(grep TOTAL "$OUT/k_$w.txt")"
      grep -E "no_op|reduction_f0_c1_r0_g[0-9]\(nvf::Tensor<(bool|float), 1" "$OUT/k_$w.txt" | cut -c1-120
    done
    timeout 100 python3 scripts/block_kernels.py llama_train_bf16_small explain > "$OUT/explain_llama_train.txt" 2>&1
    echo "explain rc=$?"; python3 -c "
import re, sys
for block in open(sys.argv[1]).read().split('-- nvf_region_')[1:]:
    if 'iota(length=8192' in block:
        print('region', block.split(':')[0], *[l for l in block.splitlines() if re.match(r'(nvFuser segments| +[0-9]+ +[a-z_]+ +nvfuser)', l)], sep='\n  ')
" "$OUT/explain_llama_train.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s17c)
    # Session 17: explain() profiles with torch.profiler by default, each region's kernels read from
    # its own record_function range: explain's GPU tests, then issue #10's forwards (il10a).
    timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_explain.py \
      "tests/test_gpu_cuda_graphs.py::test_explain_under_cuda_graphs_says_captured" \
      -p no:cacheprovider --tb=short -rfs > "$OUT/explain_tests.log" 2>&1; echo "explain tests rc=$?"
    tail -n 2 "$OUT/explain_tests.log"; grep -E "^FAILED|^ERROR|^E  " "$OUT/explain_tests.log" | head -20
    timeout 60 python3 tests/gpu_explain_runs.py default_then_user_profiler > "$OUT/explain_default.txt" 2>&1
    grep -E "^kernel counts|^nvFuser kernels|^ +[0-9]+ +[a-z_]+ +nvfuser" "$OUT/explain_default.txt" | head
    il10_half il10a "$IL10_FWD"
    echo "elapsed ${SECONDS}s"
    ;;
  s17d)
    # Session 17: explain's GPU tests with op-scope region ranges, then issue #10's training steps (il10b).
    timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_explain.py::test_seed001_segments_agree_with_torch_profiler \
      tests/test_gpu_explain.py::test_explain_by_default_leaves_torch_profiler_working \
      "tests/test_gpu_cuda_graphs.py::test_explain_under_cuda_graphs_says_captured" \
      -p no:cacheprovider --tb=short -rfs > "$OUT/explain_tests.log" 2>&1; echo "explain tests rc=$?"
    tail -n 2 "$OUT/explain_tests.log"; grep -E "^FAILED|^ERROR|^E  " "$OUT/explain_tests.log" | cut -c1-400 | head -20
    IL10_ROUNDS=${IL10_ROUNDS:-7} il10_half il10b "$IL10_TRAIN"
    echo "elapsed ${SECONDS}s"
    ;;
  s20b)
    # Session 20 (#11): does the profiler's kernel sum count nvFuser's programmatic-dependent-launch
    # overlap twice? Sum against union of kernel intervals against CUDA events, the LayerNorm fusion
    # alone and four transformer steps, nvFuser and inductor.
    timeout $((590 - SECONDS)) python3 scripts/repros/kernel_overlap.py all bert_fwd_bf16_small gpt_fwd_bf16_small \
      llama_fwd_bf16_small llama_train_bf16_small > "$OUT/overlap.txt" 2>&1; echo "overlap rc=$?"
    grep -v -i warn "$OUT/overlap.txt" | grep -v "_warn_once" | head -n 60 | cut -c1-170
    echo "elapsed ${SECONDS}s"
    ;;
  s20c)
    # Session 20 (#11): the block table side by side: every block's four backends compiled at once and
    # their GPU time timed in rotated rounds (perf.interleave --gpu), issue #11's block criteria read
    # from the per-round ratios.
    direct_tests 60 tests/test_perf_interleave.py
    timeout $((590 - SECONDS)) python3 -m perf.interleave --tag block --gpu \
      --backends inductor,nvf_bookend,nvf_untrimmed,eager --rounds ${BLOCK_ROUNDS:-5} --acceptance \
      --json "$OUT/blocks_il.json" > "$OUT/blocks_il.log" 2>&1; echo "blocks rc=$?"
    sed -n '/^| criterion/,$p' "$OUT/blocks_il.log" | cut -c1-220
    echo "elapsed ${SECONDS}s"
    ;;
  s20d)
    # Session 20 (#11): the blocks over inductor in s20c's interleaved table, region by region, with
    # nvFuser's options swept (scripts/region_scoreboard.py), CUDA source and heuristics dumped.
    for w in layernorm_fwd_f32 rmsnorm_fwd_f32 softmax_fwd_f32 embedding_scale_add_bf16 rmsnorm_fwd_bf16; do
      timeout 100 python3 scripts/region_scoreboard.py $w --dump "$OUT/d/$w" > "$OUT/sb_$w.txt" 2>&1
      echo "$w rc=$?"; grep -v -i warn "$OUT/sb_$w.txt" | grep -v _warn_once | head -n 16 | cut -c1-160
    done
    tar czf "$OUT/dumps.tgz" -C "$OUT" d && rm -rf "$OUT/d"
    echo "elapsed ${SECONDS}s"
    ;;
  s20e)
    # Session 20 (#11): cross-entropy's tail (count, sum, division) spelled four ways, alone and after
    # the row kernel: kernels per call.
    timeout 200 python3 scripts/repros/ce_tail.py > "$OUT/ce_tail.txt" 2>&1; echo "ce_tail rc=$?"
    grep -v -i warn "$OUT/ce_tail.txt" | grep -v _warn_once | cut -c1-220
    echo "elapsed ${SECONDS}s"
    ;;
  s20g)
    # Session 20 (#11): the loss's sums masked by one mask (no region cut): the cross-entropy tests,
    # the tail repro, training kernels of the transformer steps (inductor's beside LLaMA's).
    direct_tests 150 tests/test_cross_entropy.py tests/test_one_hot_sums.py
    timeout 100 python3 scripts/repros/ce_tail.py > "$OUT/ce_tail.txt" 2>&1; echo "ce_tail rc=$?"
    grep -E "^(form|whole|split)" "$OUT/ce_tail.txt" | cut -c1-200
    kernel_files 75 "llama_train_bf16_small" "nvf_bookend inductor"
    kernel_files 75 "gpt_train_bf16_small bert_train_bf16_small" "nvf_bookend"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s20h)
    # Session 20: the loss-kernel test as an LM head; the transformer models' gradients (perf.grad_check).
    direct_tests 120 tests/test_cross_entropy.py
    gradients llama_train_bf16_small,bert_train_bf16_small,gpt_train_bf16_small nvf_bookend $((400 - SECONDS))
    echo "elapsed ${SECONDS}s"
    ;;
  s21a)
    # Session 21 (#11, #10): is a block's loss to inductor in its kernel or around it, and does it need
    # the zeroing flush's dirty L2 (scripts/repros/l2_flush_kinds.py); where a graph-mode training
    # step's host time goes under both CUDA-graph backends (scripts/host_profile.py).
    timeout 240 python3 scripts/repros/l2_flush_kinds.py layernorm_fwd_f32 rmsnorm_fwd_f32 softmax_fwd_f32 \
      embedding_scale_add_bf16 rmsnorm_fwd_bf16 --rounds 3 > "$OUT/flush.txt" 2>&1; echo "flush rc=$?"
    grep -v -i warn "$OUT/flush.txt" | grep -v _warn_once | cut -c1-160
    timeout $((560 - SECONDS)) python3 scripts/host_profile.py gpt_train_bf16_small nvf_cudagraphs inductor_ro \
      --steps 200 --top 45 > "$OUT/host_own.txt" 2>&1; echo "host rc=$?"
    grep -E "^==" "$OUT/host_own.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s21b)
    # Session 21 (#10, #11): recompute_saved_views' tests on the GPU (no recorded graph returns two
    # outputs on one storage); the flush repro again (its reading flush fixed); the graph-mode GPT-2-style
    # training step's host profile with the pass; the training half under graphs, interleaved.
    direct_tests 150 tests/test_saved_views.py tests/test_gpu_cuda_graphs.py
    timeout 200 python3 scripts/repros/l2_flush_kinds.py layernorm_fwd_f32 rmsnorm_fwd_f32 softmax_fwd_f32 \
      embedding_scale_add_bf16 rmsnorm_fwd_bf16 --rounds 3 > "$OUT/flush.txt" 2>&1; echo "flush rc=$?"
    grep -v -i warn "$OUT/flush.txt" | grep -v _warn_once | cut -c1-160
    timeout 90 python3 scripts/host_profile.py gpt_train_bf16_small nvf_cudagraphs --steps 200 --top 30 \
      > "$OUT/host_own.txt" 2>&1; echo "host rc=$?"
    grep -E "^==|reconstruct_outputs|check_invariants|_construct_CUDA" "$OUT/host_own.txt"
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_graphs il10g "$IL10_TRAIN"
    echo "elapsed ${SECONDS}s"
    ;;
  s21c)
    # Session 21 (#10, #11): ConvNeXt-style training kernels against inductor's (1.24x GPU time in s21b):
    # per-kernel tables, graph mode too, and which ATen ops launch the eager kernels.
    kernel_files 120 "convnext_train_bf16_small" "nvf_bookend inductor nvf_cudagraphs nvf_bookend:ops"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s21d)
    # Session 21 (#10, #11): ConvNeXt-style training's regions alone against inductor's compile of each
    # (inputs' layouts, launches, CUDA source of the losers), two nvFuser options swept.
    timeout 420 python3 scripts/region_scoreboard.py convnext_train_bf16_small --sweep ws_normalization,tma_reduction \
      --dump "$OUT/d" --json "$OUT/sb.json" > "$OUT/sb.txt" 2>&1; echo "scoreboard rc=$?"
    grep -E "nvf .*ind|^TOTAL" "$OUT/sb.txt" | cut -c1-160
    tar czf "$OUT/dumps.tgz" -C "$OUT" d && rm -rf "$OUT/d"
    echo "elapsed ${SECONDS}s"
    ;;
  s21e)
    # Session 21 (#10, #11): ConvNeXt's LayerNorms alone, spelled and planned several ways
    # (scripts/repros/convnext_norms.py); then issue #10's training half, five backends, interleaved.
    timeout 200 python3 scripts/repros/convnext_norms.py > "$OUT/norms.txt" 2>&1; echo "norms rc=$?"
    grep -v -i warn "$OUT/norms.txt" | grep -v _warn_once | cut -c1-160 | tail -n 20
    IL10_ROUNDS=${IL10_ROUNDS:-4} il10_half il10b "$IL10_TRAIN"
    echo "elapsed ${SECONDS}s"
    ;;
  s21f)
    # Session 21 (#10, #11): narrow norm rows (NARROW_NORM_COLS): ConvNeXt's LayerNorms alone, whole, cut
    # and segmented; the split and saved-views tests on the GPU; ConvNeXt training kernels, both plans;
    # ConvNeXt's gradients.
    timeout 150 python3 scripts/repros/convnext_norms.py > "$OUT/norms.txt" 2>&1; echo "norms rc=$?"
    grep -v -i warn "$OUT/norms.txt" | grep -v _warn_once | cut -c1-160 | tail -n 14
    direct_tests 120 tests/test_split_norm_backward.py tests/test_saved_views.py
    kernel_files 90 "convnext_train_bf16_small" "nvf_bookend nvf_cudagraphs"
    pack_kernels
    gradients convnext_train_bf16_small nvf_bookend $((560 - SECONDS))
    echo "elapsed ${SECONDS}s"
    ;;
  s21g)
    # Session 21 (#10, #11): hoist_permutes' strided rule (LayerNorm2d on an NCHW-contiguous input):
    # the repro, the hoist/split/saved-views tests on the GPU, ConvNeXt kernels (training both plans,
    # inference against inductor), ConvNeXt's gradients.
    timeout 150 python3 scripts/repros/convnext_norms.py > "$OUT/norms.txt" 2>&1; echo "norms rc=$?"
    grep -v -i warn "$OUT/norms.txt" | grep -v _warn_once | cut -c1-160 | tail -n 16
    direct_tests 120 tests/test_hoist_permutes.py tests/test_split_norm_backward.py tests/test_saved_views.py
    kernel_files 80 "convnext_train_bf16_small" "nvf_bookend nvf_cudagraphs"
    kernel_files 60 "convnext_fwd_bf16_small" "nvf_bookend inductor"
    pack_kernels
    gradients convnext_train_bf16_small nvf_bookend $((560 - SECONDS))
    echo "elapsed ${SECONDS}s"
    ;;
  s25d)
    # Session 25: ask_segmenter cuts only where its trial timed the cut faster. Its GPU tests; the
    # wide norm blocks' planning notes (trial times) with and without graphs; the blocks side by side.
    direct_tests 200 tests/test_split_norm_backward.py
    ( cd scripts/repros
      timeout 150 python3 segmenter_oracle.py notes layernorm_wide_train_f32 layernorm_wide_train_bf16 \
        rmsnorm_wide_train_f32 rmsnorm_wide_train_bf16 2>&1 | grep -v -i warn
    ) | tee "$OUT/s25d_notes.txt"
    timeout $((585 - SECONDS)) python3 -m perf.interleave --tag wide --gpu \
      --backends inductor,nvf_bookend,nvf_no_segmenter,nvf_untrimmed,eager --rounds 5 --acceptance \
      --json "$OUT/wide_il.json" > "$OUT/wide_il.log" 2>&1; echo "wide rc=$?"
    grep -E "^\| [a-z]" "$OUT/wide_il.log" | tail -n 26 | cut -c1-220
    echo "elapsed ${SECONDS}s"
    ;;
  s25c)
    # Session 25: ask_segmenter cutting with or without graphs. Its GPU tests; perf's wide norm blocks,
    # GPU time side by side against it off; the model tier's training steps' segmenter notes.
    direct_tests 200 tests/test_split_norm_backward.py tests/test_perf_harness.py
    timeout 280 python3 -m perf.interleave --tag wide --gpu \
      --backends inductor,nvf_bookend,nvf_no_segmenter,nvf_untrimmed,eager --rounds 5 --acceptance \
      --json "$OUT/wide_il.json" > "$OUT/wide_il.log" 2>&1; echo "wide rc=$?"
    grep -E "^\| [a-z]" "$OUT/wide_il.log" | cut -c1-220
    ( cd scripts/repros
      timeout $((585 - SECONDS)) python3 segmenter_oracle.py notes $(echo $IL10_TRAIN | tr , ' ') 2>&1 | grep -v -i warn
    ) | tee "$OUT/s25c_notes.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s25b)
    # Session 25: segmenter-aware planning (ask_segmenter) built; its GPU tests, then LayerNorm and
    # RMSNorm steps planned whole, by default and cut.
    [ -z "$S25_NO_TESTS" ] && direct_tests 200 tests/test_split_norm_backward.py
    ( cd scripts/repros
      timeout $((585 - SECONDS)) python3 segmenter_oracle.py norms layer_norm rms_norm 2>&1 | grep -v Warning
    ) | tee "$OUT/s25b.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s25a)
    # Session 25: segmenter-aware planning's oracle (schedule.find_compatible_schedulers on each new
    # definition) against the segments nvFuser then ran: model training steps, and wide norm
    # backwards planned whole, behind a segment_set, and cut.
    ( cd scripts/repros
      timeout 200 python3 segmenter_oracle.py workload bert_train_bf16_small llama_train_bf16_small \
        convnext_train_bf16_small vit_train_bf16_small gpt_train_bf16_small 2>&1 | grep -v Warning
      timeout $((585 - SECONDS)) python3 segmenter_oracle.py norms layer_norm 2>&1 | grep -v Warning
    ) | tee "$OUT/s25a.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s24a)
    # Session 24: ConvNeXt's stem LayerNorm2d written over C in memory order, and the embedding
    # forward's nvFuser forms, against the default plan and inductor.
    ( cd scripts/repros
      python3 ln2d_memory_order.py f32 64 2>&1 | grep -v Warning
      python3 ln2d_memory_order.py bf16 64 2>&1 | grep -v Warning
      python3 ln2d_memory_order.py bf16 2 2>&1 | grep -v Warning
      python3 embedding_forward_forms.py bf16 2>&1 | grep -v Warning
      python3 embedding_forward_forms.py f32 2>&1 | grep -v Warning ) | tee "$OUT/s24a.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s24b)
    # Session 24: the f32 block norms and softmax at [8192, 4096], nvFuser's heuristic fields swept.
    ( cd scripts/repros && python3 norm_heuristics_f32.py 2>&1 | grep -v Warning ) | tee "$OUT/s24b.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s24c)
    # Session 24: why the hand-scheduled f32 norms ran faster than the executor cache's, with
    # nvFuser's launch and scheduler parameters dumped (the CUDA sources of each path into $OUT).
    mkdir -p "$OUT/dump"
    ( cd "$OUT/dump" && for case in "rmsnorm 8192 4096" "layernorm 8192 4096" "layernorm 512 768"; do
        NVFUSER_DUMP=launch_param,scheduler_params,cuda_to_file python3 "$OLDPWD/scripts/repros/fec_vs_manual.py" $case 2>&1 \
          | grep -v Warning > "$OUT/fvm_${case// /_}.txt"; tail -n 25 "$OUT/fvm_${case// /_}.txt"; done )
    ( cd "$OUT" && tar czf dump.tgz dump fec_*.cu && rm -rf dump fec_*.cu )
    echo "elapsed ${SECONDS}s"
    ;;
  s24d)
    # Session 24: where gpt_attention_train_f32, rmsnorm_fwd_bf16 and gpt_fwd_bf16_small lose to inductor.
    kernel_files 150 "gpt_attention_train_f32" "nvf_bookend inductor explain"
    kernel_files 90 "rmsnorm_fwd_bf16" "nvf_bookend inductor explain"
    kernel_files 120 "gpt_fwd_bf16_small" "nvf_cudagraphs inductor_ro"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s24e)
    # Session 24, measured at 2701986 (float32 attention with a gradient kept its explicit chain; the
    # perf backend nvf_sdpa_f32_train and the setting were reverted after this run: the chain lost).
    direct_tests 240 tests/test_attention.py tests/test_gpu_cuda_graphs.py
    timeout $((590 - SECONDS)) python3 -m perf.interleave gpt_attention_train_f32,gpt_attention_fwd_f32,gpt_attention_train_bf16 \
      --gpu --backends inductor,nvf_bookend,nvf_untrimmed,eager --rounds 5 --acceptance \
      --json "$OUT/attn_il.json" > "$OUT/attn_il.log" 2>&1; echo "blocks rc=$?"
    grep -E "^\| gpt_attention|^\| criterion|^\| (every|geomean|no block)" "$OUT/attn_il.log" | cut -c1-200
    echo "elapsed ${SECONDS}s"
    ;;
  s23l)
    # Session 23: the GPU tests of the files the review mend touched (sink_permutes, split_transposes,
    # conv_input_layout, hoist_permutes).
    direct_tests 300 tests/test_sink_permutes.py tests/test_split_transposes.py tests/test_conv_input_layout.py \
      tests/test_hoist_permutes.py tests/test_conv_weight_layout.py tests/test_memory_order_reductions.py
    echo "elapsed ${SECONDS}s"
    ;;
  s23k)
    # Session 23: the whole GPU suite (OpInfo sweep aside) after sink_permutes, split_transposes and
    # conv_input_layout, in three concurrent pytest processes.
    SUITE_S=$((590 - SECONDS)) OUT=$OUT bash "$0" suite_par
    ;;
  s23j)
    # Session 23 (#10): the regions of the two forwards still over inductor on GPU time, each alone
    # against inductor's compile of it (after sink_permutes), nvFuser's options swept on the losers.
    timeout 280 python3 scripts/region_scoreboard.py convnext_fwd_f32_large --sweep tma_reduction,tma_inner_persistent \
      > "$OUT/sb_convnext.txt" 2>&1; echo "sb convnext rc=$?"
    grep -E "^dynamo_nvf|^TOTAL|launch|option" "$OUT/sb_convnext.txt" | cut -c1-170 | head -n 60
    timeout $((585 - SECONDS)) python3 scripts/region_scoreboard.py bert_fwd_bf16_small > "$OUT/sb_bert.txt" 2>&1
    echo "sb bert rc=$?"; grep -E "^dynamo_nvf|^TOTAL|launch|option" "$OUT/sb_bert.txt" | cut -c1-170 | head -n 60
    echo "elapsed ${SECONDS}s"
    ;;
  s23i)
    # Session 23 (#10): the forwards still over inductor reduce-overhead on GPU time, kernel tables side
    # by side in one call (inductor's own totals moved 4% between calls).
    kernel_files 100 "convnext_fwd_f32_large bert_fwd_bf16_small" "nvf_cudagraphs inductor_ro"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s23g)
    # Session 23 (#10): the model tier's forwards (f32 large, bf16 small) after conv_input_layout was
    # limited to large images, five backends interleaved.
    IL10_ROUNDS=${IL10_ROUNDS:-7} il10_half il10g "$IL10_FWD_LARGE,$IL10_FWD"
    echo "elapsed ${SECONDS}s"
    ;;
  s23h)
    # Session 23 (#10): the model tier's training steps (bf16 small), five backends interleaved.
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10h "$IL10_TRAIN"
    echo "elapsed ${SECONDS}s"
    ;;
  s23f)
    # Session 23 (#10): conv_input_layout (ViT's image converted to channels-last) with split_transposes
    # on the channels-last tokens: GPU tests; the stems' kernels; ViT inference's kernels; ViT
    # inference's step times, five backends interleaved.
    direct_tests 150 tests/test_conv_input_layout.py tests/test_split_transposes.py tests/test_conv_weight_layout.py
    for dt in f32 bf16; do
      timeout 150 python3 scripts/repros/conv_stems.py $dt --kernels > "$OUT/stems_$dt.txt" 2>&1; echo "stems $dt rc=$?"
      grep -E "^(vit|convnext) " "$OUT/stems_$dt.txt"
    done
    kernel_files 100 "vit_fwd_f32_large" "nvf_cudagraphs"
    pack_kernels
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10v "vit_fwd_f32_large,vit_fwd_bf16_small"
    echo "elapsed ${SECONDS}s"
    ;;
  s23e)
    # Session 23 (#10): split_transposes (ViT's patch tokens written row-major by a region of their own):
    # its GPU tests; ViT inference's kernels; then the model tier's forwards (bf16 small and f32
    # large), five backends interleaved.
    direct_tests 150 tests/test_split_transposes.py tests/test_sink_permutes.py
    kernel_files 100 "vit_fwd_f32_large" "nvf_cudagraphs"
    pack_kernels
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10f "$IL10_FWD_LARGE,$IL10_FWD"
    echo "elapsed ${SECONDS}s"
    ;;
  s23d)
    # Session 23 (#10): vit_fwd_f32_large (1.04x inductor reduce-overhead): the image stems' kernels,
    # spelled four ways (scripts/repros/conv_stems.py --kernels); ViT inference's regions alone against
    # inductor; the hoist test that sink_permutes changed.
    direct_tests 100 tests/test_hoist_permutes.py
    for dt in f32 bf16; do
      timeout 150 python3 scripts/repros/conv_stems.py $dt --kernels > "$OUT/stems_$dt.txt" 2>&1; echo "stems $dt rc=$?"
      grep -E "^(vit|convnext) " "$OUT/stems_$dt.txt"
    done
    timeout $((585 - SECONDS)) python3 scripts/region_scoreboard.py vit_fwd_f32_large > "$OUT/sb.txt" 2>&1; echo "sb rc=$?"
    grep -v -i warn "$OUT/sb.txt" | head -n 70 | cut -c1-200
    echo "elapsed ${SECONDS}s"
    ;;
  s23c)
    # Session 23 (#10): sink_permutes (ConvNeXt's residual region in memory order): its GPU tests; the
    # image stems alone (scripts/repros/conv_stems.py); ConvNeXt inference's kernels and step times,
    # large f32 and small bf16, five backends interleaved.
    direct_tests 150 tests/test_sink_permutes.py tests/test_hoist_permutes.py
    for dt in f32 bf16; do
      timeout 120 python3 scripts/repros/conv_stems.py $dt > "$OUT/stems_$dt.txt" 2>&1; echo "stems $dt rc=$?"
      grep -E "^(vit|convnext) " "$OUT/stems_$dt.txt"
    done
    kernel_files 100 "convnext_fwd_f32_large" "nvf_cudagraphs"
    pack_kernels
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10cx "convnext_fwd_f32_large,convnext_fwd_bf16_small"
    echo "elapsed ${SECONDS}s"
    ;;
  s23b)
    # Session 23 (#10): the GPU-bound f32 inference that loses under graphs (convnext_fwd_f32_large 1.12x,
    # vit_fwd_f32_large 1.04x inductor reduce-overhead): kernel tables side by side, nvFuser's
    # segments, ATen ops behind the kernels; ConvNeXt's regions alone against inductor.
    kernel_files 100 "convnext_fwd_f32_large vit_fwd_f32_large" "nvf_cudagraphs inductor_ro explain nvf_bookend:ops"
    pack_kernels
    timeout $((585 - SECONDS)) python3 scripts/region_scoreboard.py convnext_fwd_f32_large --sweep tma_reduction \
      > "$OUT/sb.txt" 2>&1; echo "sb rc=$?"; grep -v -i warn "$OUT/sb.txt" | head -n 60 | cut -c1-200
    echo "elapsed ${SECONDS}s"
    ;;
  s23a)
    # Session 23 (#10): the model tier's last unmeasured third, GPU-bound inference in f32 (large
    # batch), five backends interleaved, after ConvNeXt inference's GPU span per replay under graphs.
    timeout 120 python3 -m perf.interleave convnext_fwd_bf16_small \
      --backends inductor_ro,nvf_cudagraphs --gpu --rounds 7 > "$OUT/span.log" 2>&1; echo "span rc=$?"
    grep -E "^\| [a-z]" "$OUT/span.log" | cut -c1-170
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10l "$IL10_FWD_LARGE"
    echo "elapsed ${SECONDS}s"
    ;;
  s21h|s22f)
    # Sessions 21 and 22 (#10): the training half, five backends, interleaved (session 21: saved views,
    # narrow norm rows and the strided hoist in).
    IL10_ROUNDS=${IL10_ROUNDS:-5} il10_half il10b "$IL10_TRAIN"
    echo "elapsed ${SECONDS}s"
    ;;
  s21i|s22e)
    # Sessions 21 and 22 (#10): the forward half, five backends, interleaved.
    IL10_ROUNDS=${IL10_ROUNDS:-7} il10_half il10a "$IL10_FWD"
    echo "elapsed ${SECONDS}s"
    ;;
  s22b)
    # Session 22 (#10): memory-order reductions, channels-last conv weights and lone pointwise regions
    # under graphs: their GPU tests; the repro; ConvNeXt inference's kernels under graphs against
    # inductor reduce-overhead; convnext_fwd's step times, five backends interleaved.
    direct_tests 200 tests/test_memory_order_reductions.py tests/test_conv_weight_layout.py
    timeout 150 python3 scripts/repros/convnext_head.py > "$OUT/head.txt" 2>&1; echo "head rc=$?"; cat "$OUT/head.txt"
    kernel_files 90 "convnext_fwd_bf16_small" "nvf_cudagraphs nvf_reduce_logical_cudagraphs inductor_ro"
    pack_kernels
    timeout $((585 - SECONDS)) python3 -m perf.interleave convnext_fwd_bf16_small \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds 7 --acceptance \
      --json "$OUT/il.json" > "$OUT/il.log" 2>&1; echo "il rc=$?"
    grep -E "^\| [a-z]" "$OUT/il.log" | tail -n 12 | cut -c1-170
    echo "elapsed ${SECONDS}s"
    ;;
  s22c)
    # Session 22 (#10): the head spelled as two-stage reductions on the NHWC view (the repro), then the
    # whole GPU suite (OpInfo sweep aside) in three concurrent pytest processes.
    timeout 120 python3 scripts/repros/convnext_head.py > "$OUT/head.txt" 2>&1; echo "head rc=$?"; grep -v -i warn "$OUT/head.txt"
    SUITE_S=$((590 - SECONDS)) OUT=$OUT bash "$0" suite_par
    ;;
  s22d)
    # Session 22 (#10): the session's passes: their GPU tests, the head repro (`nvf` is the default
    # plan), ConvNeXt inference's kernels under graphs. (Its call also ran a chained-reductions boundary
    # and its test; removed after it, having changed nothing.)
    direct_tests 200 tests/test_memory_order_reductions.py tests/test_conv_weight_layout.py
    timeout 120 python3 scripts/repros/convnext_head.py > "$OUT/head.txt" 2>&1; echo "head rc=$?"; grep -v -i warn "$OUT/head.txt"
    kernel_files 90 "convnext_fwd_bf16_small" "nvf_cudagraphs inductor_ro"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s22g)
    # Session 22 (#10): the forward half again with 15 rounds (s22e's host was slow and noisy: graph
    # replays host-bound), then the host profile of ConvNeXt inference's replays, both graph backends.
    IL10_ROUNDS=${IL10_ROUNDS:-15} il10_half il10c "$IL10_FWD"
    timeout $((590 - SECONDS)) python3 scripts/host_profile.py convnext_fwd_bf16_small nvf_cudagraphs inductor_ro \
      --steps 200 > "$OUT/host.txt" 2>&1; echo "host rc=$?"
    echo "elapsed ${SECONDS}s"
    ;;
  s22h)
    # Session 22 (#10): ConvNeXt training's gradients against eager's with this session's passes (conv
    # weights converted and the bias add a region under graphs; the head's mean in memory order).
    gradients convnext_train_bf16_small nvf_cudagraphs,nvf_bookend 300
    tail -n 4 "$OUT/grad.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s22i)
    # Session 22: the GPU tests of the files the final review touched (lone-op rule narrowed; the
    # memory-order pass on rewrite_to_fixpoint), with the CUDA-graph tests.
    direct_tests 400 tests/test_memory_order_reductions.py tests/test_conv_weight_layout.py \
      tests/test_gpu_cuda_graphs.py tests/test_hoist_permutes.py
    echo "elapsed ${SECONDS}s"
    ;;
  s22a)
    # Session 22 (#10): session 21's loose ends on the GPU (s21j's tests); ConvNeXt inference's losing
    # kernels alone (scripts/repros/convnext_head.py); its regions alone against inductor's compile.
    direct_tests 240 tests/test_unflatten_reductions.py tests/test_gpu_cuda_graphs.py tests/test_split_norm_backward.py \
      tests/test_hoist_permutes.py tests/test_saved_views.py
    timeout 150 python3 scripts/repros/convnext_head.py > "$OUT/head.txt" 2>&1; echo "head rc=$?"; cat "$OUT/head.txt"
    timeout $((580 - SECONDS)) python3 scripts/region_scoreboard.py convnext_fwd_bf16_small --sweep tma_reduction \
      --json "$OUT/sb.json" > "$OUT/sb.txt" 2>&1; echo "scoreboard rc=$?"
    grep -E "nvf .*ind|^TOTAL" "$OUT/sb.txt" | cut -c1-160
    echo "elapsed ${SECONDS}s"
    ;;
  s21j)
    # Session 21's loose ends for the next session: the GPU tests its last commits touched after the
    # suite ran (the narrow rule in backward graphs only, the shared graph-mode training loop, the
    # review mend), then ConvNeXt's training kernels in graph mode.
    direct_tests 300 tests/test_unflatten_reductions.py tests/test_gpu_cuda_graphs.py tests/test_split_norm_backward.py \
      tests/test_hoist_permutes.py tests/test_saved_views.py
    kernel_files 90 "convnext_train_bf16_small" "nvf_cudagraphs"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s20i)
    # Session 20: the loss-kernel test past direct launch's checking call; the perf model tests
    # (cross-entropy in every training step).
    direct_tests $((420 - SECONDS)) tests/test_cross_entropy.py tests/test_perf_interleave.py tests/test_perf_models.py
    echo "elapsed ${SECONDS}s"
    ;;
  s19e)
    # Session 19: the GPU suite's files that suite560 did not reach (its 560 s ran out at test 344 of
    # 371, all passing), then BERT-style training and inference kernels side by side, and gradients.
    timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -rfs tests/test_gpu_fusion_sharing.py \
      tests/test_gpu_kernel_cache.py tests/test_gpu_model_grads.py tests/test_gpu_stability.py tests/test_gqa_attention.py \
      tests/test_lean_views.py tests/test_notebook.py tests/test_one_hot_sums.py tests/test_output_aliasing.py \
      tests/test_perf_models.py tests/test_split_norm_backward.py tests/test_training_extras.py \
      tests/test_unflatten_reductions.py tests/test_unpermute_reductions.py tests/test_verify_regions.py \
      tests/test_embedding_matmul_backward.py > "$OUT/gpu_tests_rest.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 3 "$OUT/gpu_tests_rest.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests_rest.log" | head -20
    kernel_files 80 "bert_train_bf16_small bert_fwd_bf16_small" "nvf_bookend inductor"
    pack_kernels
    gradients llama_train_bf16_small,bert_train_bf16_small,gpt_train_bf16_small nvf_bookend $((585 - SECONDS))
    echo "elapsed ${SECONDS}s"
    ;;
  s19d)
    # Session 19 (#11): does nvFuser load a norm's weight after its reduction, and does gating the
    # reduction's input on the weight move the load; embedding tests (CPU plans on this GPU machine);
    # training kernel totals with the row-sum threshold at 384 indices.
    timeout 150 python3 scripts/repros/norm_weight_early.py > "$OUT/norm_early.txt" 2>&1; echo "norm rc=$?"
    grep -v Warn "$OUT/norm_early.txt" | grep -v _warn | tail -n 12
    direct_tests 200 tests/test_embedding_matmul_backward.py tests/test_distributed_cpu.py
    kernel_files 100 "llama_train_bf16_small gpt_train_bf16_small" "nvf_bookend inductor"
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s19c)
    # Session 19 (#11): the row-sum scatter as 8-byte words and the row-sum threshold: embedding GPU tests
    # (CPU plans on this GPU machine too), the five forms alone, training kernel totals; then s19b's forwards.
    direct_tests 150 tests/test_embedding_matmul_backward.py tests/test_embedding_backward.py \
      tests/test_embedding_saved_rows.py tests/test_distributed_cpu.py
    timeout 90 python3 scripts/repros/embedding_grad_forms.py > "$OUT/forms.txt" 2>&1; echo "forms rc=$?"; cat "$OUT/forms.txt" | grep -v Warn
    for w in llama_train_bf16_small gpt_train_bf16_small bert_train_bf16_small; do
      f="$OUT/k_${w}_nvf_bookend.txt"
      timeout 100 python3 scripts/block_kernels.py $w nvf_bookend > "$f" 2>&1; echo "$w rc=$?: $(grep TOTAL "$f" | cut -c1-120)"
      grep -E "index_|nvf::nvfuser_pointwise_f0_c1_r0_g[0-9]\(nvf::Tensor<(long|nvf::__bfloat), 2|embedding" "$f" | cut -c1-120
    done
    S_OFFSET=$SECONDS OUT="$OUT/fwd" bash "$0" s19b
    mv "$OUT"/fwd/* "$OUT"/ 2>/dev/null; mv "$OUT/kernels.tgz" "$OUT/kernels_fwd.tgz" 2>/dev/null
    pack_kernels
    echo "elapsed ${SECONDS}s"
    ;;
  s19a)
    # Session 19 (#11): embedding gradients as matmuls (matmul_embedding_backward): their GPU tests, the
    # four forms timed alone, training kernel totals against inductor, the models' gradients.
    direct_tests 150 tests/test_embedding_matmul_backward.py tests/test_embedding_backward.py \
      tests/test_embedding_saved_rows.py
    timeout 90 python3 scripts/repros/embedding_grad_forms.py > "$OUT/forms.txt" 2>&1; echo "forms rc=$?"; cat "$OUT/forms.txt"
    kernel_files 100 "bert_train_bf16_small llama_train_bf16_small gpt_train_bf16_small" "nvf_bookend inductor"
    pack_kernels
    gradients llama_train_bf16_small,bert_train_bf16_small,gpt_train_bf16_small nvf_bookend $((580 - SECONDS))
    echo "elapsed ${SECONDS}s"
    ;;
  s19b)
    # Session 19 (#11): the forwards over inductor, kernel tables side by side; BERT's forward and the
    # embedding block's regions alone against inductor, their CUDA source kept.
    kernel_files 80 "bert_fwd_bf16_small gpt_fwd_bf16_small llama_fwd_bf16_small" "nvf_bookend inductor"
    pack_kernels
    for w in embedding_scale_add_bf16 gpt_fwd_bf16_small; do
      [ $((SECONDS + ${S_OFFSET:-0})) -lt 480 ] || break
      timeout $((585 - SECONDS - ${S_OFFSET:-0})) python3 scripts/region_scoreboard.py $w --dump "$OUT/dump_$w" --margin-us 0.1 \
        > "$OUT/scoreboard_$w.txt" 2>&1; echo "$w rc=$?: $(tail -n 1 "$OUT/scoreboard_$w.txt")"
      grep -E "^dynamo_nvf|option |launch" "$OUT/scoreboard_$w.txt" | cut -c1-130 | head -30
    done
    tar czf "$OUT/dumps.tgz" -C "$OUT" $(cd "$OUT" && ls -d dump_* 2>/dev/null) && rm -rf "$OUT"/dump_*
    echo "elapsed ${SECONDS}s"
    ;;
  s18a)
    # Session 18 (#11): every region of the LLaMA and BERT training steps timed alone against inductor
    # compiling the same region graph; losing regions swept over nvFuser's options, their CUDA source kept.
    for w in llama_train_bf16_small bert_train_bf16_small; do
      TORCH_LOGS=output_code timeout 280 python3 scripts/region_scoreboard.py $w --dump "$OUT/dump_$w" \
        --json "$OUT/$w.json" > "$OUT/$w.txt" 2> "$OUT/${w}_stderr.log"; echo "$w rc=$?"
      tail -n 1 "$OUT/$w.txt"; grep -E "Error|error" "$OUT/${w}_stderr.log" | grep -v "^ *#" | cut -c1-300 | tail -n 3
    done
    tar czf "$OUT/dumps.tgz" -C "$OUT" $(cd "$OUT" && ls -d dump_* 2>/dev/null) && rm -rf "$OUT"/dump_*
    echo "elapsed ${SECONDS}s"
    ;;
  s18b)
    # Session 18 (#11): slices hoisted above pointwise ops (RoPE backward) and fast math for exp/log
    # regions: model kernel totals side by side with inductor, their GPU tests, and LLaMA's regions alone.
    kernel_files 100 "llama_train_bf16_small bert_train_bf16_small" "nvf_bookend inductor"
    timeout 240 python3 -m pytest -q tests/test_fast_math.py tests/test_hoist_slices.py tests/test_data_movement.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 2 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | cut -c1-300 | head -10
    gradients llama_train_bf16_small,bert_train_bf16_small nvf_bookend 160
    if [ $SECONDS -lt 420 ]; then
      timeout $((570 - SECONDS)) python3 scripts/region_scoreboard.py llama_train_bf16_small --margin-us 1e9 \
        > "$OUT/scoreboard_llama.txt" 2>&1; echo "scoreboard rc=$?"; tail -n 1 "$OUT/scoreboard_llama.txt"
    fi
    echo "elapsed ${SECONDS}s"
    ;;
  s18c)
    # Session 18 (#11): GPU kernel time per step, nvf_bookend against inductor, on the other transformer
    # workloads; then LLaMA's losing regions swept over nvFuser options (resize scheduler off included).
    kernel_files 80 "gpt_train_bf16_small llama_fwd_bf16_small gpt_fwd_bf16_small bert_fwd_bf16_small vit_fwd_bf16_small vit_train_bf16_small" \
      "nvf_bookend inductor"
    pack_kernels
    if [ $SECONDS -lt 430 ]; then
      timeout $((575 - SECONDS)) python3 scripts/region_scoreboard.py llama_train_bf16_small > "$OUT/scoreboard_llama.txt" 2>&1
      echo "scoreboard rc=$?"; tail -n 1 "$OUT/scoreboard_llama.txt"
    fi
    echo "elapsed ${SECONDS}s"
    ;;
  s18d)
    # Session 18 (#11): var_mean as two sums against nvFuser's Welford, on the LayerNorm regions of the
    # BERT/GPT/ViT forwards and BERT training (each region alone against inductor's kernel). Run at
    # a7eda61; the variant was removed after it (lowerings._var_mean), so this now sweeps fast_math only.
    for w in bert_fwd_bf16_small gpt_fwd_bf16_small bert_train_bf16_small; do
      [ $SECONDS -lt 450 ] || break
      timeout $((580 - SECONDS)) python3 scripts/region_scoreboard.py $w --sweep fast_math --margin-us 0.1 \
        > "$OUT/scoreboard_$w.txt" 2>&1; echo "$w rc=$?: $(tail -n 1 "$OUT/scoreboard_$w.txt")"
      grep -E "^dynamo_nvf|option " "$OUT/scoreboard_$w.txt" | cut -c1-110 | head -40
    done
    echo "elapsed ${SECONDS}s"
    ;;
  s18e)
    # Session 18: the OpInfo sweep alone (fast math now compiles exp/log regions), sharded over processes.
    opinfo_shards 8 330
    wait
    opinfo_merge
    grep -h -E "passed|failed" /tmp/opinfo/pytest*.log | tail -n 8
    head -n 1 "$OUT/opinfo.txt"; sed -n '/^failures/,$p' "$OUT/opinfo.txt" | head -40
    echo "elapsed ${SECONDS}s"
    ;;
  il10a|il10b)
    # Issue #10's table in two calls (one call's 590 s does not hold ten workloads at 9 rounds): the
    # forwards, then the training steps; `python -m perf.interleave --from-json a.json,b.json
    # --acceptance` judges them together.
    if [ "$1" = il10a ]; then il10_half il10a "$IL10_FWD"; else il10_half il10b "$IL10_TRAIN"; fi
    echo "elapsed ${SECONDS}s"
    ;;
  s16h)
    # Session 16, after the work-buffer slot fix: direct launch's tests (five training steps per model,
    # every launcher checked) and the models' gradients; the five-backend repro that faulted; then
    # issue #10's table (perf.interleave, each backend's batches ~50 ms at its own step time).
    direct_tests 200 tests/test_gpu_direct_launch.py tests/test_direct_launch.py tests/test_gpu_model_grads.py
    timeout 150 python3 scripts/graph_steps_repro.py llama_train_bf16_small eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs \
      --steps 100 --rounds 2 > "$OUT/five.txt" 2>&1; echo "five rc=$?"; grep -E "^OK|^FAULT|^CHANGED" "$OUT/five.txt" | head -n 8
    timeout $((590 - SECONDS)) python3 -m perf.interleave "$IL10_WORKLOADS" \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds ${IL10_ROUNDS:-9} --acceptance \
      --json "$OUT/il10.json" > "$OUT/il10.log" 2>&1; echo "il10 rc=$?"
    sed -n '/^### Acceptance/,$p' "$OUT/il10.log"; grep -E "device-side|AcceleratorError" "$OUT/il10.log" | head -n 3
    echo "elapsed ${SECONDS}s"
    ;;
  s16g)
    # Session 16: the launchers whose outputs differ from nvFuser's (llama_train backward): their plans.
    w=${S16_WORKLOAD:-llama_train_bf16_small}
    timeout 200 python3 scripts/graph_steps_repro.py $w nvf_bookend --steps 5 --rounds 1 --log DEBUG > "$OUT/differ.txt" 2>&1
    echo "differ rc=$?"; grep -E "^OK|^FAULT|differs" "$OUT/differ.txt" | cut -c1-300 | head
    command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 2
    echo "elapsed ${SECONDS}s"
    ;;
  s16c)
    # Session 16: scalar kernel arguments launched directly (tests, ConvNeXt inference's host split);
    # a training step's graph replay on the host, call tree (cProfile sorted by cumulative time).
    direct_tests 200 tests/test_gpu_direct_launch.py tests/test_direct_launch.py
    timeout 90 python3 scripts/step_host_split.py convnext_fwd_bf16_small --steps 60 > "$OUT/split_convnext_fwd.txt" 2>&1
    echo "split rc=$?"; grep -E "^step wall|^region calls|^nvf_region" "$OUT/split_convnext_fwd.txt" | cut -c1-150
    timeout 90 python3 scripts/block_kernels.py convnext_fwd_bf16_small nvf_bookend:ops > "$OUT/ops_convnext_fwd.txt" 2>&1
    echo "ops rc=$?"
    timeout 150 python3 scripts/host_profile.py ${S16_TRAIN:-bert_train_bf16_small} nvf_cudagraphs inductor_ro --steps 100 --top 70 \
      --cumulative > "$OUT/prof_train.txt" 2>&1; echo "profile rc=$?"; grep "^==" "$OUT/prof_train.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s16b)
    # Session 16: where a graph replay's host time goes (cProfile, nvf_cudagraphs against inductor_ro)
    # on the forwards that are host-bound under graphs; ConvNeXt inference without graphs, host ops
    # and kernels against inductor's. One file per question (at most 8 files come back).
    for w in ${S16_PROFILE_WORKLOADS:-llama_fwd_bf16_small bert_fwd_bf16_small}; do
      timeout 120 python3 scripts/host_profile.py $w nvf_cudagraphs inductor_ro --steps 300 --top 45 > "$OUT/prof_$w.txt" 2>&1
      echo "$w rc=$?"; grep "^==" "$OUT/prof_$w.txt"
    done
    w=convnext_fwd_bf16_small
    for b in nvf_bookend inductor; do
      echo "=== split $b" >> "$OUT/convnext_fwd.txt"; timeout 90 python3 scripts/step_host_split.py $w --backend $b --steps 60 --ops >> "$OUT/convnext_fwd.txt" 2>&1
      echo "=== kernels $b" >> "$OUT/convnext_fwd.txt"; timeout 90 python3 scripts/block_kernels.py $w $b >> "$OUT/convnext_fwd.txt" 2>&1
    done
    grep -E "^===|^step wall|^region calls|TOTAL" "$OUT/convnext_fwd.txt"
    echo "elapsed ${SECONDS}s"
    ;;
  s15b)
    # Session 15, closing: direct launch's tests (segments, work buffers, cooperative kernels) and the
    # models' gradients with it on, then issue #10's table from interleaved rounds, with
    # nvf_fec_execute (direct launch off) beside the default.
    direct_tests 150 tests/test_gpu_direct_launch.py tests/test_direct_launch.py tests/test_gpu_model_grads.py
    il10_table
    echo "elapsed ${SECONDS}s"
    ;;
  s15a)
    # Session 15: direct launch through the C launcher (runtime/launcher.c), grid reductions' zeroed
    # work buffers included. The build environment (a C compiler and Python.h, as Triton needs), the
    # tests, then per region call and per step what it saves, and which regions it covers.
    { command -v cc gcc; python3 -c "import sysconfig, os; p = sysconfig.get_paths()['include']; print(p, os.path.exists(os.path.join(p, 'Python.h')))"; } 2>&1 | head -n 4
    direct_tests 240 tests/test_gpu_direct_launch.py tests/test_direct_launch.py ${S15_TESTS:-}
    direct_cost "bert_fwd_bf16_small llama_fwd_bf16_small convnext_fwd_bf16_small bert_train_bf16_small convnext_train_bf16_small vit_train_bf16_small" 5
    echo "elapsed ${SECONDS}s"
    ;;
  s14c)
    # Session 14: direct launch's GPU tests, then issue #10's table from interleaved rounds, with
    # nvf_fec_execute (direct launch off) beside the default. (Session 14 ran it while direct launch
    # was opt-in, as backend nvf_direct_launch beside nvf_bookend.)
    direct_tests 100 tests/test_gpu_direct_launch.py
    il10_table
    echo "elapsed ${SECONDS}s"
    ;;
  s14b)
    # Session 14: direct launch with ready ctypes arguments and inductor's allocator; its GPU tests;
    # then what it saves per region call and per step, in one process (scripts/direct_launch_cost.py).
    direct_tests 150 tests/test_gpu_direct_launch.py
    direct_cost "bert_fwd_bf16_small llama_fwd_bf16_small gpt_fwd_bf16_small vit_fwd_bf16_small convnext_fwd_bf16_small bert_train_bf16_small convnext_train_bf16_small" 7
    echo "elapsed ${SECONDS}s"
    ;;
  s14a)
    # Session 14: direct launch (runtime/direct_launch.py). Its GPU tests and the backend's; which
    # model regions launch directly and their host us per call, against direct_launch off; then the
    # model step times side by side (interleaved rounds).
    timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_direct_launch.py tests/test_gpu_backend.py \
      -p no:cacheprovider --tb=short -rfs -x > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"; grep -E "^FAILED|^ERROR|^E  " "$OUT/tests.log" | head -n 30
    for wl in bert_fwd_bf16_small llama_fwd_bf16_small convnext_train_bf16_small; do for b in nvf_bookend nvf_fec_execute; do
      echo "=== $wl $b" >> "$OUT/split.txt"
      timeout 70 python3 scripts/step_host_split.py $wl --backend $b --steps 60 >> "$OUT/split.txt" 2>&1
    done; done; grep -E "^===|^step wall|^region calls" "$OUT/split.txt"
    grep -E "^nvf_region" "$OUT/split.txt" | awk '{print $NF, $0}' | cut -c1-200 | sort | uniq -c | sort -rn | head -n 5
    timeout $((585 - SECONDS)) python3 -m perf.interleave \
      ${IL14_WORKLOADS:-llama_fwd_bf16_small,gpt_fwd_bf16_small,bert_fwd_bf16_small,vit_fwd_bf16_small,convnext_fwd_bf16_small,bert_train_bf16_small,convnext_train_bf16_small} \
      --backends eager,inductor,nvf_bookend,nvf_fec_execute --rounds ${IL_ROUNDS:-5} \
      --json "$OUT/il14.json" > "$OUT/il14.log" 2>&1
    echo "il rc=$?"; grep -E "^\| [a-z]" "$OUT/il14.log" | grep -v "workload" | cut -c1-150 | head -n 40; echo "elapsed ${SECONDS}s"
    ;;
  s13a)
    # Session 13: lone_composites_eager (a GELU/SiLU/LayerNorm alone in its region runs as its ATen op,
    # no graphs): GPU tests and gradients, then step and GPU time side by side against it off.
    timeout 240 python3 -m pytest -q -m gpu tests/test_composites.py tests/test_embedding_saved_rows.py \
      tests/test_gpu_model_grads.py -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log"
    gradients bert_train_bf16_small,vit_train_bf16_small,gpt_train_bf16_small,llama_train_bf16_small nvf_bookend 150
    timeout $((585 - SECONDS)) python3 -m perf.interleave \
      ${IL_WORKLOADS:-vit_fwd_bf16_small,convnext_fwd_bf16_small,convnext_train_bf16_small,bert_fwd_bf16_small,gpt_fwd_bf16_small,bert_train_bf16_small,vit_train_bf16_small,gpt_train_bf16_small} \
      --backends eager,inductor,nvf_bookend,nvf_lone_composites --rounds ${IL_ROUNDS:-5} \
      --json "$OUT/il_comp.json" > "$OUT/il_comp.log" 2>&1
    echo "il rc=$?"; grep -E "^\| [a-z]" "$OUT/il_comp.log" | grep -v "workload" | cut -c1-150 | tail -n 40; echo "elapsed ${SECONDS}s"
    ;;
  s13b)
    # Session 13: where bert_fwd's CUDA-graph step loses to inductor_ro on the host (cProfile of both),
    # region host time per step with lone_composites_eager on and off, then a longer interleave of the
    # forward models (the host-bound ones) with it on and off.
    timeout 150 python3 scripts/host_profile.py bert_fwd_bf16_small nvf_cudagraphs inductor_ro --steps 300 --top 30 \
      > "$OUT/host_profile.txt" 2>&1; echo "hp rc=$?"; grep "^==" "$OUT/host_profile.txt"
    for b in nvf_bookend nvf_lone_composites; do for wl in bert_fwd_bf16_small vit_fwd_bf16_small; do
      echo "=== $wl $b" >> "$OUT/split.txt"
      timeout 60 python3 scripts/step_host_split.py $wl --backend $b --steps 60 >> "$OUT/split.txt" 2>&1
    done; done; grep -E "^===|^step wall|^region calls" "$OUT/split.txt"
    timeout $((585 - SECONDS)) python3 -m perf.interleave \
      vit_fwd_bf16_small,bert_fwd_bf16_small,gpt_fwd_bf16_small,convnext_fwd_bf16_small \
      --backends eager,nvf_bookend,nvf_lone_composites --rounds ${IL_ROUNDS:-15} \
      --json "$OUT/il_fwd.json" > "$OUT/il_fwd.log" 2>&1
    echo "il rc=$?"; grep -E "^\| [a-z]" "$OUT/il_fwd.log" | grep -v "workload" | cut -c1-150 | head -n 12; echo "elapsed ${SECONDS}s"
    ;;
  s13c)
    # Session 13: cProfile of bert_fwd without graphs, lone_composites_eager on and off (which calls the
    # host time goes to); BERT training's kernels with embedding gradients as atomic adds at every size.
    timeout 200 python3 scripts/host_profile.py bert_fwd_bf16_small nvf_bookend nvf_lone_composites \
      --steps 300 --top 45 > "$OUT/host_profile.txt" 2>&1; echo "hp rc=$?"; grep "^==" "$OUT/host_profile.txt"
    for b in nvf_bookend nvf_atomic_embedding_all; do kernel_table bert_train_bf16_small $b; done
    grep -E "^===|TOTAL|embedding|index_add|Memset|fill" "$OUT/kernels.txt" | cut -c1-160
    echo "elapsed ${SECONDS}s"
    ;;
  s13d)
    # Session 13: one lone GELU's host cost, nvFuser region call against ATen's gelu, in one process.
    timeout 200 python3 scripts/lone_op_host.py > "$OUT/lone_op_host.txt" 2>&1; echo "rc=$?"
    grep -v "Warning\|warn" "$OUT/lone_op_host.txt" | tail -n 12; echo "elapsed ${SECONDS}s"
    ;;
  s12b)
    # Session 12: segment_norm_backward (a norm backward's column sums behind segment_set, one region,
    # no graphs): its tests, gradients, kernel tables against the default, first-call compile, then
    # step time side by side.
    timeout 200 python3 -m pytest -q -m gpu tests/test_split_norm_backward.py -p no:cacheprovider --tb=short -rfs \
      > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 1 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log"
    gradients bert_train_bf16_small,vit_train_bf16_small,gpt_train_bf16_small nvf_segment_norm_bwd 150
    for wl in bert_train_bf16_small vit_train_bf16_small gpt_train_bf16_small; do
      for b in nvf_segment_norm_bwd nvf_bookend; do kernel_table $wl $b; done
    done
    region_compile bert_train_bf16_small nvf_segment_norm_bwd "$OUT/regions_bert_segment.txt" 100
    timeout $((585 - SECONDS)) python3 -m perf.interleave bert_train_bf16_small,vit_train_bf16_small,gpt_train_bf16_small \
      --backends nvf_bookend,nvf_segment_norm_bwd,inductor,eager --rounds 5 --json "$OUT/il_seg.json" > "$OUT/il_seg.log" 2>&1
    echo "il rc=$?"; grep -E "^\| (bert|vit|gpt)" "$OUT/il_seg.log" | tail -n 12; echo "elapsed ${SECONDS}s"
    ;;
  rest11)
    # Session 11: the GPU suite's files after the 318 tests suite560 reached in 560 s, then issue #11's
    # block table in the time left.
    timeout 300 python3 -m pytest -q -m gpu tests/test_output_aliasing.py tests/test_perf_models.py \
      tests/test_split_norm_backward.py tests/test_training_extras.py tests/test_unflatten_reductions.py \
      tests/test_unpermute_reductions.py tests/test_verify_regions.py \
      -p no:cacheprovider --tb=short -rfs --durations=8 > "$OUT/gpu_tests_rest.log" 2>&1; echo "gpu tests rc=$?"
    tail -n 14 "$OUT/gpu_tests_rest.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests_rest.log" | head -30
    timeout $((585 - SECONDS)) python3 -m perf --all --tag block --backends inductor,nvf_bookend,nvf_untrimmed,eager --no-host \
      --time-budget $((560 - SECONDS)) --json "$OUT/blocks11.json" > "$OUT/blocks11.log" 2>&1; echo "blocks11 rc=$?"
    tail -n 8 "$OUT/blocks11.log"; echo "elapsed ${SECONDS}s"
    ;;
  s11b)
    # Session 11, call 3: ConvNeXt's head-backward sums recompute the broadcast from the [N, C]
    # gradient: gradients, GPU tests, kernels; the GQA and known-bug GPU tests.
    gradients convnext_train_bf16_small,convnext_train_f32_small nvf_bookend,nvf_cudagraphs 240
    timeout 90 python3 scripts/block_kernels.py convnext_train_bf16_small nvf_bookend 2>&1 | grep -v "_warn_once\|UserWarning" > "$OUT/kernels.txt"
    grep -E "TOTAL|runs in eager" "$OUT/kernels.txt" | cut -c1-200
    timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_model_grads.py tests/test_gqa_attention.py -p no:cacheprovider --tb=short -rfs \
      > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    echo "elapsed ${SECONDS}s"
    ;;
  s11a)
    # Session 11, call 2: SDPA reads grouped K/V heads (enable_gqa) and ConvNeXt's head backward cut
    # in two instead of eager: GPU tests, gradients, kernels, host split, a short interleave.
    timeout 200 python3 -m pytest -q -m gpu tests/test_gqa_attention.py tests/test_gpu_model_grads.py tests/test_attention.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    gradients convnext_train_bf16_small,convnext_train_f32_small,llama_train_bf16_small nvf_bookend,nvf_cudagraphs 240
    for wl in llama_fwd_bf16_small llama_train_bf16_small convnext_train_bf16_small; do
      for b in nvf_bookend inductor; do kernel_table $wl $b; done
    done
    for run in "llama_fwd_bf16_small" "convnext_train_bf16_small"; do
      timeout 150 python3 scripts/step_host_split.py $run > /tmp/split.txt 2>&1; echo "split $run rc=$?"
      grep -v "Warn\|warn\|USDT" /tmp/split.txt >> "$OUT/host_split.txt"; grep -E "^step wall|^region calls" /tmp/split.txt
    done
    timeout $((590 - SECONDS)) python3 -m perf.interleave llama_fwd_bf16_small,llama_train_bf16_small,convnext_train_bf16_small \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds 3 --acceptance \
      --json "$OUT/il.json" > "$OUT/il.log" 2>&1; echo "il rc=$?"
    sed -n '/^### Acceptance/,/^$/p' "$OUT/il.log" | head -8
    grep -E "(llama|convnext).*(nvf_bookend|inductor |nvf_cudagraphs|inductor_ro|eager)" "$OUT/il.log" | tail -n 15
    echo "elapsed ${SECONDS}s"
    ;;
  s10c)
    # Session 10, call 4: permutes hoisted in forward graphs only: ConvNeXt training with no region in
    # eager (gradients, GPU tests that now assert it), its kernels.
    timeout 200 python3 -m perf.grad_check convnext_train_bf16_small,convnext_train_f32_small nvf_bookend,nvf_cudagraphs \
      > "$OUT/grad.txt" 2>&1; echo "grad rc=$?"; grep -E "within|FAIL|fell back|runs in eager" "$OUT/grad.txt" | cut -c1-200 | head -8
    timeout 90 python3 scripts/block_kernels.py convnext_train_bf16_small nvf_bookend 2>&1 | grep -v "_warn_once\|UserWarning" > "$OUT/kernels.txt"
    grep -E "TOTAL|runs in eager" "$OUT/kernels.txt" | cut -c1-200
    timeout 260 python3 -m pytest -q -m gpu tests/test_gpu_model_grads.py tests/test_gpu_explain.py -p no:cacheprovider --tb=short -rfs \
      > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    echo "elapsed ${SECONDS}s"
    ;;
  s10d)
    # Session 10, call 5: issue #10's table (5 interleaved rounds) and issue #11's block table.
    timeout 330 python3 -m perf.interleave \
      llama_fwd_bf16_small,gpt_fwd_bf16_small,bert_fwd_bf16_small,vit_fwd_bf16_small,convnext_fwd_bf16_small,llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small \
      --backends eager,inductor,inductor_ro,nvf_bookend,nvf_cudagraphs --rounds ${IL10_ROUNDS:-5} --acceptance \
      --json "$OUT/il10.json" > "$OUT/il10.log" 2>&1; echo "il10 rc=$?"
    sed -n '/^### Acceptance/,$p' "$OUT/il10.log"
    timeout $((585 - SECONDS)) python3 -m perf --all --tag block --backends inductor,nvf_bookend,nvf_untrimmed,eager --no-host \
      --time-budget $((560 - SECONDS)) --json "$OUT/blocks11.json" > "$OUT/blocks11.log" 2>&1; echo "blocks11 rc=$?"
    tail -n 8 "$OUT/blocks11.log"; echo "elapsed ${SECONDS}s"
    ;;
  s10a)
    # Session 10, call 1: where ConvNeXt's training step spends host time (regions against the rest;
    # op tables of nvf_bookend, eager and inductor), LLaMA and ConvNeXt inference for contrast;
    # ConvNeXt's LayerNorm and head kernels per stage; the float32 addmm unfuse on the MLP blocks.
    timeout 150 python3 scripts/repros/ln_shapes.py > "$OUT/ln_shapes.txt" 2>&1; echo "ln rc=$?"
    grep -v "Warn\|warn" "$OUT/ln_shapes.txt" | tail -n 14
    for run in "convnext_train_bf16_small --ops" "convnext_train_bf16_small --backend eager --ops" \
               "convnext_train_bf16_small --backend inductor --ops" "llama_fwd_bf16_small --ops" "convnext_fwd_bf16_small"; do
      timeout 150 python3 scripts/step_host_split.py $run > /tmp/split.txt 2>&1; echo "split $run rc=$?"
      grep -v "Warn\|warn\|USDT" /tmp/split.txt >> "$OUT/host_split.txt"
      grep -E "^step wall|^region calls" /tmp/split.txt
    done
    timeout 200 python3 -m perf --only gpt_mlp_fwd_f32 gpt_mlp_train_f32 gpt_mlp_fwd_bf16 --backends inductor,nvf_bookend,nvf_addmm_fused \
      --no-host --json "$OUT/addmm.json" > "$OUT/addmm.log" 2>&1; echo "addmm rc=$?"
    sed -n '/GPU time/,/^$/p' "$OUT/addmm.log" | head -20
    echo "elapsed ${SECONDS}s"
    ;;
  s9e)
    # Session 9, last checks: ConvNeXt training after the pin rule's revert (no region in eager,
    # kernels), its gradients; the changed tests; issue #11's block table.
    timeout 100 python3 -m perf.grad_check convnext_train_bf16_small,llama_train_bf16_small nvf_bookend > "$OUT/grad.txt" 2>&1
    echo "grad rc=$?"; grep -E "within|FAIL|fell back|grad check|runs in eager" "$OUT/grad.txt" | cut -c1-200 | head -6
    timeout 60 python3 scripts/block_kernels.py convnext_train_bf16_small nvf_bookend > "$OUT/kernels.txt" 2>&1
    echo "kernels rc=$?"; grep -E "TOTAL|runs in eager" "$OUT/kernels.txt" | cut -c1-200
    timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_explain.py::test_channels_last_layer_norm_region_is_one_kernel_without_a_cast_round_trip \
      tests/test_one_hot_sums.py tests/test_embedding_backward.py tests/test_output_aliasing.py tests/test_cross_entropy.py \
      -p no:cacheprovider --tb=short -rfs > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -n 2 "$OUT/tests.log"
    grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
    timeout 230 python3 -m perf --all --tag block --backends eager,inductor,nvf_bookend,nvf_untrimmed --no-host \
      --time-budget 210 --json "$OUT/blocks11.json" > "$OUT/blocks11.log" 2>&1; echo "blocks11 rc=$?"
    tail -n 8 "$OUT/blocks11.log"
    echo "elapsed ${SECONDS}s"
    ;;
  hostdiag)
    # Issue #10/#12: where the host time of a step goes (cProfile per backend), and nvFuser's own
    # scopes per call and per compile (NVFUSER_TRACE, scripts/nvf_trace.py).
    timeout 150 python3 scripts/host_profile.py vit_fwd_bf16_small nvf_bookend inductor --steps 200 --top 30 \
      > "$OUT/hp_vit.txt" 2>&1; echo "host_profile vit rc=$?"; head -c 9000 "$OUT/hp_vit.txt"
    for wl in ${TRACE_WORKLOADS:-vit_fwd_bf16_small bert_train_bf16_small llama_fwd_bf16_small}; do
      timeout 150 python3 scripts/nvf_trace.py $wl --steady 50 --top 30 --trace /tmp/trace_$wl.json \
        --json "$OUT/trace_$wl.json" > "$OUT/trace_$wl.txt" 2>&1; echo "trace $wl rc=$?"; head -c 7000 "$OUT/trace_$wl.txt"
    done
    echo "elapsed ${SECONDS}s"
    ;;
  blocks11)
    # Issue #11's table: every block workload (f32 and bf16, forward and training) against inductor,
    # untrimmed and eager, on GPU time (host time left out: it needs a second compile per pair).
    timeout 570 python3 -m perf --all --tag block --backends eager,inductor,nvf_bookend,nvf_untrimmed --no-host \
      --time-budget 550 --json "$OUT/blocks11.json" > "$OUT/blocks11.log" 2>&1; echo "blocks11 rc=$?"
    sed -n '/GPU time/,/^$/p' "$OUT/blocks11.log" | head -40; tail -n 5 "$OUT/blocks11.log"
    ;;
  blockk)
    # Issue #11: kernel tables (nvf_bookend, inductor) and nvFuser's segments of the losing training blocks.
    for wl in ${BLOCKK_WORKLOADS:-softmax_train_f32 layernorm_train_f32 rmsnorm_train_f32 dropout_residual_layernorm_train_f32}; do
      for be in nvf_bookend inductor explain; do
        timeout 60 python3 scripts/block_kernels.py $wl $be > "/tmp/k_${wl}_${be}.txt" 2>&1
        echo "== $wl $be rc=$?"; if [ $be = explain ]; then grep -E "^-- nvf_region|segment|scheduler" "/tmp/k_${wl}_${be}.txt" | head -20; else cat "/tmp/k_${wl}_${be}.txt" | cut -c1-150 | tail -n 14; fi
      done
    done
    for f in /tmp/k_*.txt; do echo "#### $f"; cat "$f"; done > "$OUT/blockk_all.txt"; echo "elapsed ${SECONDS}s"
    ;;
  glue)
    timeout 560 python3 -m perf --only 'llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small' \
      --backends inductor,nvf_aten_glue,nvf_bookend,inductor_ro,nvf_aten_glue_cudagraphs,nvf_cudagraphs \
      --json "$OUT/glue.json" > "$OUT/glue.log" 2>&1; echo "glue rc=$?"; grep -E "^\[|^\|" "$OUT/glue.log" | head -60
    ;;
  abort)
    timeout 560 python3 -m perf --only 'llama_train_bf16_small,gpt_train_bf16_small,bert_train_bf16_small,vit_train_bf16_small,convnext_train_bf16_small' \
      --backends eager,inductor,nvf_bookend,inductor_ro,nvf_cudagraphs --json "$OUT/train.json" > "$OUT/train.log" 2>&1
    echo "train rc=$?"; grep -E "^\[|terminate|what\(\)" "$OUT/train.log" | cut -c1-200
    ;;
  decide)
    # Whether the opt-in options become defaults: the split test on the GPU, then side-by-side step
    # times (perf.interleave: every backend compiled once, rotated rounds) with GPU kernel time.
    timeout 90 python3 -m pytest -q -m gpu tests/test_split_norm_backward.py -p no:cacheprovider -rfs \
      > "$OUT/split_tests.log" 2>&1; echo "split tests rc=$?"; tail -n 2 "$OUT/split_tests.log"
    timeout 300 python3 -m perf.interleave bert_train_bf16_small,gpt_train_bf16_small,llama_train_bf16_small \
      --backends inductor_ro,nvf_aten_glue_cudagraphs,nvf_cudagraphs,nvf_split_norm_bwd_cudagraphs \
      --json "$OUT/il_graphs.json" > "$OUT/il_graphs.log" 2>&1; echo "graphs rc=$?"
    timeout 100 python3 -m perf.interleave bert_train_bf16_small \
      --backends inductor,nvf_aten_glue,nvf_bookend,nvf_split_norm_bwd --json "$OUT/il_nographs.json" \
      > "$OUT/il_nographs.log" 2>&1; echo "no graphs rc=$?"
    timeout 100 python3 -m perf.interleave bert_train_bf16_large \
      --backends inductor,nvf_bookend,nvf_split_norm_bwd --json "$OUT/il_large.json" \
      > "$OUT/il_large.log" 2>&1; echo "large rc=$?"
    for f in il_graphs il_nographs il_large; do sed -n '/^$/,$p' "$OUT/$f.log" | tail -n 16; done
    echo "elapsed ${SECONDS}s"
    ;;
  fault)
    # The illegal memory access of bert_train_bf16_large (perf.interleave, 2026-11-23): which region,
    # with blocking launches; then whether the fused embedding or inference alone fault.
    CUDA_LAUNCH_BLOCKING=1 timeout 150 python3 scripts/fallback_repro.py bert_train_bf16_large > "$OUT/fault_blocking.log" 2>&1
    echo "blocking rc=$?"; grep -E -A16 "^## .*FAULT" "$OUT/fault_blocking.log" | cut -c1-300
    [ -n "${FAULT_ONLY_BLOCKING:-}" ] && exit 0
    timeout 100 python3 scripts/fallback_repro.py bert_train_bf16_large --option fuse_embedding=false > "$OUT/fault_noemb.log" 2>&1
    echo "no fused embedding rc=$?"; grep -E "^## |^warning" "$OUT/fault_noemb.log" | cut -c1-300 | head -8
    timeout 80 python3 scripts/fallback_repro.py bert_fwd_bf16_large > "$OUT/fault_fwd.log" 2>&1
    echo "inference rc=$?"; grep -E "^## |^warning" "$OUT/fault_fwd.log" | cut -c1-300 | head -8
    echo "elapsed ${SECONDS}s"
    ;;
  kernels)
    # Kernel tables of the transformer training steps, fused glue against inductor (issue #11), then
    # the short abort bisection: bert's three pairs alone, then bert/nvf_bookend with blocking launches.
    for wl in bert_train_bf16_small llama_train_bf16_small; do
      for be in nvf_bookend inductor; do
        timeout 90 python3 scripts/block_kernels.py $wl $be > "$OUT/kernels_${wl}_${be}.txt" 2>&1
        echo "$wl $be rc=$?"; tail -n 1 "$OUT/kernels_${wl}_${be}.txt"
      done
    done
    timeout 150 python3 -m perf --only bert_train_bf16_small --backends eager,inductor,nvf_bookend \
      --json /tmp/b3.json > "$OUT/bisect3.log" 2>&1; echo "bisect3 rc=$?"; grep -E "^\[|Error" "$OUT/bisect3.log" | cut -c1-200
    CUDA_LAUNCH_BLOCKING=1 timeout 120 python3 -m perf --only bert_train_bf16_small --backends nvf_bookend --no-host \
      --json /tmp/b1.json > "$OUT/bisect1.log" 2>&1; echo "bisect1 rc=$?"; grep -E "^\[|Error" "$OUT/bisect1.log" | cut -c1-200
    echo "elapsed ${SECONDS}s"
    ;;
  blocks)
    timeout 560 python3 -m perf --backends eager,inductor,nvf_bookend,nvf_untrimmed --baseline perf/baseline.json \
      --json "$OUT/perf_blocks.json" > "$OUT/perf_blocks.log" 2>&1; echo "blocks rc=$?"; tail -n 70 "$OUT/perf_blocks.log"
    ;;
  tests)
    # Timing-sensitive runs first, alone on the machine; then the GPU suite beside the OpInfo sweep,
    # sharded over processes (neither times anything).
    explain_reports
    timeout 60 python3 scripts/host_latency.py > "$OUT/host_latency.log" 2>&1
    timeout 60 python3 scripts/probe_view_output.py > "$OUT/probe_view_output.log" 2>&1
    NVF_EVIDENCE_BUDGET_S=$(( ${NVF_EVIDENCE_BUDGET_S:-560} - SECONDS )) OUT="$OUT" bash "$0" suite
    cat "$OUT/host_latency.log"; grep -E "^(raw|compiled)" "$OUT/probe_view_output.log"
    ;;
  suite)
    # The GPU suite beside the OpInfo sweep sharded over processes (neither times anything), within
    # NVF_EVIDENCE_BUDGET_S seconds.
    LEFT=${NVF_EVIDENCE_BUDGET_S:-560}
    opinfo_shards "${NVF_OPINFO_SHARDS:-6}" "$LEFT"
    timeout $((LEFT - 10)) python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfsP \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1
    wait
    opinfo_merge
    tail -n 3 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -20
    grep -E "^(stability|dynamic|automatic)" "$OUT/gpu_tests.log"
    head -n 1 "$OUT/opinfo.txt"; sed -n '/^failures/,$p' "$OUT/opinfo.txt" | head -40
    echo "suite elapsed ${SECONDS}s"
    ;;
  perf)
    # Run 1: the full default set; then what trimming changes (untrimmed against trimmed, on GPU
    # time, host time and kernels) and the leading-expand rule on the training blocks.
    timeout 420 python3 -m perf --json "$OUT/perf_run1.json" > "$OUT/perf_run1.log" 2>&1; echo "run1 rc=$?"
    for metric in gpu_us host_us kernels; do
      echo "## --metric $metric"
      python3 -m perf --compare "$OUT/perf_run1.json" --baseline "$OUT/perf_run1.json" \
        --compare-backend nvf_untrimmed --baseline-backend nvf_bookend --metric $metric; echo "rc=$?"
    done > "$OUT/untrimmed_vs_trimmed.log" 2>&1
    timeout 150 python3 -m perf --tag train --backends nvf_bookend,nvf_trim_broadcasts --no-host \
      --json "$OUT/perf_broadcasts.json" > "$OUT/perf_broadcasts.log" 2>&1; echo "broadcasts rc=$?"
    grep -E "regression|rc=" "$OUT/untrimmed_vs_trimmed.log"; echo "elapsed ${SECONDS}s"
    ;;
  final)
    # Run 2 of the full default set (plus Dynamo's floor) checked against run 1 (perf/baseline.json),
    # a live untrimmed-against-trimmed check on the workloads where trimming showed, then the explain
    # reports and the GPU suite beside the OpInfo sweep.
    timeout 330 python3 -m perf --backends eager,inductor,nvf_bookend,nvf_untrimmed,dynamo_eager \
      --baseline perf/baseline.json --json "$OUT/perf_run2.json" > "$OUT/perf_run2.log" 2>&1
    echo "run2 rc=$?"; tail -n 2 "$OUT/perf_run2.log"
    untrimmed_live
    explain_reports
    echo "perf and explain done at ${SECONDS}s"
    NVF_OPINFO_SAMPLES=${NVF_OPINFO_SAMPLES:-4} NVF_EVIDENCE_BUDGET_S=$(( ${NVF_FINAL_BUDGET_S:-575} - SECONDS )) \
      OUT="$OUT" bash "$0" suite
    ;;
  confirm)
    # The last call of a session: the seed metadata programs and embedding beside Dynamo's floor,
    # --quick against the baseline, the explain reports, then the GPU suite beside the OpInfo sweep.
    timeout 120 python3 -m perf --only 'lone_reshape,metadata_only,embedding_*' \
      --backends eager,inductor,nvf_bookend,nvf_aten_embedding,dynamo_eager \
      --json /tmp/views.json > "$OUT/perf_views.log" 2>&1; echo "views rc=$?"
    start=$SECONDS; timeout 120 python3 -m perf --quick --baseline perf/baseline.json --json /tmp/quick.json \
      > "$OUT/perf_quick.log" 2>&1; echo "quick rc=$? wall $((SECONDS - start))s" | tee -a "$OUT/perf_quick.log"
    explain_reports
    grep -A8 "### Host time" "$OUT/perf_views.log"; tail -n 2 "$OUT/perf_quick.log"
    NVF_OPINFO_SAMPLES=${NVF_OPINFO_SAMPLES:-4} NVF_EVIDENCE_BUDGET_S=$(( ${NVF_FINAL_BUDGET_S:-560} - SECONDS )) \
      OUT="$OUT" bash "$0" suite
    ;;
  check)
    # Embedding fused against ATen's, the live untrimmed-against-trimmed check, --quick's wall time,
    # host latency, then the GPU suite (no OpInfo).
    timeout 90 python3 -m perf --only 'embedding_*' --backends eager,inductor,nvf_bookend,nvf_aten_embedding \
      --json "$OUT/perf_embedding.json" > "$OUT/perf_embedding.log" 2>&1; echo "embedding rc=$?"
    untrimmed_live
    start=$SECONDS; timeout 120 python3 -m perf --quick --json /tmp/quick.json > "$OUT/perf_quick.log" 2>&1
    echo "quick rc=$? wall $((SECONDS - start))s" | tee -a "$OUT/perf_quick.log"
    timeout 60 python3 scripts/host_latency.py > "$OUT/host_latency.log" 2>&1
    timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfsP \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1
    tail -n 3 "$OUT/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head -20
    cat "$OUT/host_latency.log"; grep -E "regression|^\| embedding" "$OUT/untrimmed_live.log" "$OUT/perf_embedding.log"
    echo "elapsed ${SECONDS}s"
    ;;
esac
