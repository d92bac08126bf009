#!/usr/bin/env bash
# A GPU slot's playbook (benchmarks/README.md, "A GPU slot"): one verb per device call, each short enough
# for the device tool's 2,000-character command, every call repeating the idempotent setup because a
# call starts a fresh shell. State lives outside the copied working tree (GS_DIR), which the next call's
# copy may replace; evidence leaves the machine only through $OUT, so `wait` packs whatever is recorded.
#
#   bash benchmarks/gpu_session.sh prepare              # here, after the last commit: wheels into .whl/, the
#                                                       # archive and the commit (data/git-state.env) into data/
#   bash benchmarks/gpu_session.sh bench                # device: fast-path bench JSON into $OUT (<= 4.5 min)
#   bash benchmarks/gpu_session.sh holdout              # device: the pilot split held out of train ($GS_DIR/pilot)
#   TAG=a bash benchmarks/gpu_session.sh start 7m ARGS... # device: a campaign under a deadline, detached (setsid);
#                                                       # campaigns with different TAGs run side by side
#   bash benchmarks/gpu_session.sh wait 270             # device: follow them up to 270 s, then pack into $OUT
#   bash benchmarks/gpu_session.sh pack                 # device: records, plans, bench JSON, logs -> one tar
#
# Carry `.whl` and `data` (ignored paths). ARGS are reproduce's key=value (paper=convit tables=[table2]);
# the scale is $SCALE (default small) on data=$DATA (default cifar10_jpeg: the device has no internet).
set -euo pipefail
cd "$(dirname "$0")/.."

GS_DIR=${GS_DIR:-/tmp/gpu_session}
ARCHIVE=${ARCHIVE:-data/cifar10-jpeg.tar.xz}
SCALE=${SCALE:-small}
DATA=${DATA:-cifar10_jpeg}
PY=${PY:-python3}
export REPRO_RESULTS_DIR=${REPRO_RESULTS_DIR:-$GS_DIR/results} REPRO_CACHE_DIR=${REPRO_CACHE_DIR:-$GS_DIR/cache}
export REPRO_DATA_DIR=${REPRO_DATA_DIR:-$GS_DIR/data} PYTHONUNBUFFERED=1

prepare() {  # here: pure-Python wheels the device image lacks, and the dataset archive, into ignored folders
    "$PY" -m pip download -q --no-deps -d .whl hydra-core==1.3.8 omegaconf==2.3.1
    "$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # an sdist on PyPI: built here
    mkdir -p data && cp -n "${1:?give the path of cifar10-jpeg.tar.xz}" data/
    # the device's copy has no .git: its records name this commit (repro.records.git_state)
    local dirty; dirty=$(git status --porcelain --untracked-files=no -- . ':!results' | grep -c . || true)
    printf 'REPRO_GIT_SHA=%s\nREPRO_GIT_DIRTY=%s\n' "$(git rev-parse HEAD)" "$([ "$dirty" = 0 ] && echo 0 || echo 1)" \
        >data/git-state.env
    ls -l .whl data
}

setup() {  # every device call: install the wheels, unpack the data, seed the results folder with ours
    : "${OUT:?set OUT: the folder whose files come back}"
    mkdir -p "$GS_DIR" "$OUT"
    if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$GS_DIR/site" .whl/*.whl
    fi
    export PYTHONPATH="$GS_DIR/site${PYTHONPATH:+:$PYTHONPATH}"
    if [ -f data/git-state.env ]; then set -a; . data/git-state.env; set +a; fi
    if [ ! -d "$REPRO_DATA_DIR/cifar10-jpeg/train" ]; then
        mkdir -p "$REPRO_DATA_DIR" && tar -xJf "$ARCHIVE" -C "$REPRO_DATA_DIR"
    fi
    [ -d "$REPRO_RESULTS_DIR" ] || cp -rp results "$REPRO_RESULTS_DIR"  # committed records: finished runs skipped
}

pack() {  # one tar of what the campaign recorded (records, plans, bench JSON) and the logs, into $OUT
    (cd "$REPRO_RESULTS_DIR" && find . -path "./*/$SCALE/*" -name '*.json' -newer "$GS_DIR/started" \
        -o -path './bench/*.json' -newer "$GS_DIR/started") | sed 's|^\./||' >"$GS_DIR/packed.txt" || true
    tar -czf "$OUT/results-$SCALE.tar.gz" -C "$REPRO_RESULTS_DIR" -T "$GS_DIR/packed.txt"
    cp "$GS_DIR"/*.log "$OUT/" 2>/dev/null || true
    echo "packed $(grep -c /records/ "$GS_DIR/packed.txt" || true) record(s) into $OUT/results-$SCALE.tar.gz;" \
         "here: tar -xzf <files_at>/results-$SCALE.tar.gz -C results"
}

verb=${1:?verb: prepare, bench, holdout, start, wait or pack}; shift
[ "$verb" = prepare ] && { prepare "$@"; exit; }
setup
[ -f "$GS_DIR/started" ] || touch "$GS_DIR/started"
case "$verb" in
    bench)  # capped (BENCH_LIMIT_S, default 270 s) so that a 15-minute lease keeps 7 minutes for a campaign; the
            # bench saves its JSON after each part, so a capped one still brings back what it measured
        timeout "${BENCH_LIMIT_S:-270}" "$PY" -m benchmarks.fastpath ${BENCH_ARGS:---processes --compile} \
            --out "$REPRO_RESULTS_DIR/bench" 2>&1 | tee "$GS_DIR/bench.log" || echo "bench: failed or stopped at its limit"
        cp "$REPRO_RESULTS_DIR"/bench/*-fastpath.json "$OUT/" 2>/dev/null || true ;;
    holdout)  # a pilot chooses its protocol on 500 images a class held out of train, never the test set
        [ -d "$GS_DIR/pilot/val" ] || "$PY" -m repro.data.holdout "$REPRO_DATA_DIR/cifar10-jpeg" "$GS_DIR/pilot" --per-class 500 ;;
    start)
        deadline=${1:?start DEADLINE (24m, or a UTC time) key=value ...}; shift
        tag=${TAG:-campaign}
        setsid bash -c 'echo $$ >"$0"; exec "$@"' "$GS_DIR/$tag.pid" "$PY" -m repro deadline "$deadline" \
            --margin "${MARGIN:-60}" --hold-back reproduce "scale=$SCALE" "data=$DATA" report=false runtime.progress=false "$@" \
            >"$GS_DIR/$tag.log" 2>&1 </dev/null &
        sleep 5; cat "$GS_DIR/$tag.log" ;;
    wait)  # until every campaign started here has ended, or the time is up
        end=$((SECONDS + ${1:-540}))
        running() { for f in "$GS_DIR"/*.pid; do kill -0 "$(cat "$f")" 2>/dev/null && return 0; done; return 1; }
        while [ $SECONDS -lt "$end" ] && running; do sleep 5; done
        for f in "$GS_DIR"/*.pid; do echo "== ${f%.pid}.log"; tail -n 8 "${f%.pid}.log" || true; done; pack ;;
    pack) pack ;;
    *) echo "unknown verb $verb: prepare, bench, holdout, start, wait or pack" >&2; exit 2 ;;
esac
