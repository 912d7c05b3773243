#!/usr/bin/env bash
# Runs two commands; passes when both exit 0 and the first line of each output that matches the
# extended regex $1 has the same matching text (a port against the program it ports).
#   same_line.sh PATTERN COMMAND1... --- COMMAND2...
set -uo pipefail
pattern=$1
shift
first=() second=()
while [ $# -gt 0 ] && [ "$1" != "---" ]; do first+=("$1"); shift; done
shift
second=("$@")
a=$("${first[@]}" 2>&1) || { printf '%s\nexit code %d: %s\n' "$a" $? "${first[*]}"; exit 1; }
b=$("${second[@]}" 2>&1) || { printf '%s\nexit code %d: %s\n' "$b" $? "${second[*]}"; exit 1; }
la=$(printf '%s\n' "$a" | grep -Eom1 "$pattern")
lb=$(printf '%s\n' "$b" | grep -Eom1 "$pattern")
printf 'first:  %s\nsecond: %s\n' "$la" "$lb"
if [ -z "$la" ] || [ "$la" != "$lb" ]; then echo "the lines differ (or are missing)"; exit 1; fi
