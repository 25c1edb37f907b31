# Sourced by ./run and ./test: create .venv and install a requirements file into it.
# pip runs only when the requirements changed since the last install (a stamp in .venv).
# Usage: srifty_venv requirements.txt|requirements-dev.txt
srifty_venv() {
  local req="$1" stamp sum
  if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv (Python: $(python3 --version 2>&1))"
    python3 -m venv .venv
  fi
  stamp=".venv/.srifty-$(basename "$req").sha256"
  sum=$(cat requirements*.txt | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
    echo "==> installing $req into .venv (first time: a few minutes; torch comes from this disk)"
    # (pip warns about every local index folder that does not exist here; those lines are noise)
    .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req" \
      2> >(grep -v "^WARNING: Location 'file:" >&2)
    echo "$sum" > "$stamp"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
}
