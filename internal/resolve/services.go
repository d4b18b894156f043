// SPDX-License-Identifier: Apache-2.0

package resolve

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// ServicesFile is where port numbers are named.
const ServicesFile = "/etc/services"

// Services names ports per protocol, from lines "name port/proto
// [aliases] [# comment]"; the first name given for a port is its name.
type Services map[serviceKey]string

type serviceKey struct {
	proto string // "tcp" or "udp"
	port  uint16
}

// LoadServices reads ServicesFile; a missing file names nothing.
func LoadServices() (Services, error) {
	f, err := os.Open(ServicesFile)
	if os.IsNotExist(err) {
		return Services{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseServices(f)
}

// ParseServices reads the services(5) format; malformed lines are skipped,
// as the C library skips them.
func ParseServices(r io.Reader) (Services, error) {
	s := Services{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		portText, proto, ok := strings.Cut(fields[1], "/")
		port, err := strconv.ParseUint(portText, 10, 16)
		if !ok || err != nil || port == 0 {
			continue
		}
		k := serviceKey{strings.ToLower(proto), uint16(port)}
		if _, seen := s[k]; !seen {
			s[k] = fields[0]
		}
	}
	return s, sc.Err()
}

// Name is the service on port for proto ("tcp", "udp"), "" when unnamed.
func (s Services) Name(proto string, port uint16) string { return s[serviceKey{proto, port}] }
