#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
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
		# go's fuzzing engine itself sometimes ends a run that found
		# nothing with "context deadline exceeded" when -fuzztime runs out
		# while a worker is mid-input (seen once in CI, FuzzParseNetns,
		# whose numeric inputs scan /proc). A finding always writes its
		# input ("Failing input written to"); such a run is tried again
		# once, any other failure fails.
		for attempt in 1 2; do
			if $GO test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/stacktop-fuzz.$$ 2>&1; then
				break
			fi
			if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' /tmp/stacktop-fuzz.$$ &&
				! grep -q 'Failing input written to' /tmp/stacktop-fuzz.$$; then
				echo "fuzz $pkg $target: the fuzzing engine timed out without a finding; once more"
				continue
			fi
			cat /tmp/stacktop-fuzz.$$
			rm -f /tmp/stacktop-fuzz.$$
			exit 1
		done
	done
done
rm -f /tmp/stacktop-fuzz.$$
