// SPDX-License-Identifier: Apache-2.0

package output

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strings"
	"testing"

	"github.com/stacktop/stacktop/internal/kube"
)

// A connection of a pod names it in every format; one outside pods leaves
// the text line as it was and the columns empty.
func TestFormatsNameThePod(t *testing.T) {
	s := snapshot()
	s.Records[0].Names = kube.Names{Namespace: "shop", Pod: "web-7c5f9d8b4-x2x9q", Container: "nginx"}
	s.Records[1].Names = kube.Names{Namespace: "shop", Pod: "web-7c5f9d8b4-x2x9q"} // the sandbox

	var text bytes.Buffer
	if err := New("text", &text, true).Write(s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	if !strings.Contains(lines[0], " pod shop/web-7c5f9d8b4-x2x9q/nginx [CLOSED]") ||
		!strings.Contains(lines[1], " pod shop/web-7c5f9d8b4-x2x9q/- [CLOSED]") {
		t.Errorf("text:\n%s", text.String())
	}
	plain := snapshot()
	if line := TextLine(&plain.Records[0]); strings.Contains(line, " pod ") {
		t.Errorf("outside pods: %s", line)
	}

	var b bytes.Buffer
	if err := New("csv", &b, true).Write(s); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	at := slices.Index(Header, "namespace")
	if got := rows[1][at : at+3]; !slices.Equal(got, []string{"shop", "web-7c5f9d8b4-x2x9q", "nginx"}) ||
		!slices.Equal(Header[at:at+3], []string{"namespace", "pod", "container"}) {
		t.Errorf("CSV %v under %v", got, Header[at:at+3])
	}
}
