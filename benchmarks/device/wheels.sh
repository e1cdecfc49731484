# Sourced by the scripts beside it: on the lent machine (torch, no Ray or env packages), install
# the cp312 wheels carried in .whl (see rware_ppo.sh) into /tmp/site and put it and the
# checkout on PYTHONPATH. NO_WHEELS=1 skips it where the packages are installed.
if [ -d .whl ] && [ -z "${NO_WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    # a wheel re-zipped to fit the carry limit may have lost its members' modes: Ray's servers
    # are executables
    find /tmp/site/ray/core -type f -exec chmod u+x {} + 2>/dev/null
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
