#!/usr/bin/env bash
# A project of the user's own, in a directory outside the source tree, that uses an installed
# libaccel through one language's binding by the lines README.md gives and nothing else: the
# template in tests/install/downstream/<language> is copied, its two placeholders filled in
# (/path/to/libaccel: this checkout; /opt/accel: the install prefix), built with the language's own
# tool, and run alone and on two ranks under the installed `accel launch`, with no LD_LIBRARY_PATH.
# README.md must show each of the template's configuration lines verbatim (checked first), so what
# a user copies is what was tested.
set -euo pipefail
language=$1 prefix=$2 source=$3 work=$4
template=$source/tests/install/downstream/$language
rm -rf "$work" && mkdir -p "$work"
unset LD_LIBRARY_PATH ACCEL_LIB_DIR ACCEL_LIBRARY
export HF_HOME=$work/no-hf-home

# Every non-blank line of the template's configuration files, as README.md must show it: whole
# lines of a file the user writes; the variables of build.env within a README command line.
missing=0
while IFS= read -r -d '' file; do
  whole=-x
  [[ $file == *.env ]] && whole=
  while IFS= read -r line; do
    [ -z "${line// /}" ] && continue
    if ! grep -qF $whole -- "$line" "$source/README.md"; then
      echo "README.md lacks this line of ${file#"$template"/}: $line"; missing=1
    fi
  done < "$file"
done < <(find "$template" -type f \( -name '*.toml' -o -name go.mod -o -name '*.env' \) -print0)
[ "$missing" = 0 ] || exit 1

project=$work/project
cp -r "$template" "$project"
find "$project" -type f -exec sed -i -e "s|/path/to/libaccel|$source|g" -e "s|/opt/accel|$prefix|g" {} +
cd "$project"
# What the README tells the user to export, if anything: KEY=VALUE lines.
if [ -f build.env ]; then
  set -a; . ./build.env; set +a
fi
case $language in
  rust)
    cargo build --offline --quiet
    program=(target/debug/my-trainer) ;;
  go)
    # A module cache of its own: the one in $HOME may hold this version from an earlier install.
    export GOMODCACHE=$work/gomodcache
    go build -modcacherw -o my-trainer .
    program=(./my-trainer) ;;
  julia)
    program=(julia main.jl) ;;
  *) echo "unknown language '$language'"; exit 2 ;;
esac
"${program[@]}"
"$prefix/bin/accel" launch -n 2 "${program[@]}" | tee "$work/run.log"
grep -q "downstream ok: .*2 ranks" "$work/run.log"
echo "downstream $language project passed"
