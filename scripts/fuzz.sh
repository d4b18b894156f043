#!/bin/sh
# Runs every Go fuzz target (func FuzzXxx in a _test.go file) for a short,
# bounded time: FUZZTIME each (default 3s), one at a time. `go test` already
# runs their seed corpora; this explores beyond them. A failure leaves the
# crashing input under the package's testdata/fuzz/ and exits non-zero.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-3s}
GO=${GO:-go}
git grep -l '^func Fuzz' -- '*_test.go' | while read -r file; do
	pkg=./$(dirname "$file")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "fuzz $pkg $target ($FUZZTIME)"
		$GO test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/stacktop-fuzz.$$ 2>&1 || {
			cat /tmp/stacktop-fuzz.$$
			rm -f /tmp/stacktop-fuzz.$$
			exit 1
		}
	done
done
rm -f /tmp/stacktop-fuzz.$$
