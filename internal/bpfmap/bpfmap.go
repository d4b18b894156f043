// SPDX-License-Identifier: Apache-2.0

// Package bpfmap reads whole BPF hash maps from user space, for the engines
// that walk their tables every refresh.
package bpfmap

import (
	"errors"
	"slices"

	"github.com/cilium/ebpf"
)

// ReadAll reads every entry of a hash map with batch lookups into keys and
// values, reusing their memory. Batch lookups walk the map bucket by bucket
// and, unlike key-by-key iteration, neither restart nor abort when entries
// are deleted meanwhile — and connections close all the time.
func ReadAll[K, V any](m *ebpf.Map, keys []K, values []V) ([]K, []V, error) {
	const chunk = 4096 // far more than one hash bucket ever holds
	keys, values = keys[:0], values[:0]
	var cursor ebpf.MapBatchCursor
	for {
		keys, values = slices.Grow(keys, chunk), slices.Grow(values, chunk)
		n, err := m.BatchLookup(&cursor, keys[len(keys):len(keys)+chunk], values[len(values):len(values)+chunk], nil)
		keys, values = keys[:len(keys)+n], values[:len(values)+n]
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return keys, values, nil
		}
		if err != nil {
			return keys[:0], values[:0], err
		}
	}
}
