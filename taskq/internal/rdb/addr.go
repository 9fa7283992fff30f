package rdb

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// SentinelScheme starts an address naming Redis Sentinels and the master
// set they watch: redis-sentinel://[user:pass@]host1:port1,host2:port2/MASTER[?db=N].
const SentinelScheme = "redis-sentinel://"

// SentinelRefresh is how often a client on Sentinel asks the sentinels for
// the master besides following their +switch-master events, so that a missed
// event (a sentinel restarted, the connection to it lost during the
// failover) or a master demoted in place (its writes then answer READONLY)
// binds the client to the wrong server for this long at most.
const SentinelRefresh = 2 * time.Second

// defaultSentinelPort is the port of a sentinel named without one.
const defaultSentinelPort = "26379"

// parseAddr turns an address into client options: "host:port", several
// comma-separated "host:port" cluster seeds, a redis:// (or rediss://,
// unix://) URL as rueidis reads it, or a redis-sentinel:// address.
func parseAddr(addr string) (rueidis.ClientOption, error) {
	switch {
	case strings.HasPrefix(addr, SentinelScheme):
		return parseSentinel(addr)
	case strings.Contains(addr, "://"):
		return rueidis.ParseURL(addr)
	}
	var opt rueidis.ClientOption
	for h := range strings.SplitSeq(addr, ",") {
		if strings.TrimSpace(h) == "" {
			return opt, errors.New("an empty host in the list")
		}
		opt.InitAddress = append(opt.InitAddress, strings.TrimSpace(h))
	}
	return opt, nil
}

// parseSentinel reads redis-sentinel://[user:pass@]h1:p1,h2:p2/MASTER[?db=N]:
// the sentinels to ask (port 26379 when left out), the master set's name
// (required) and the master's credentials and database. Sentinels that
// require a password of their own take it as ?sentinel_password= (and
// ?sentinel_username=).
func parseSentinel(addr string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	rest := strings.TrimPrefix(addr, SentinelScheme)
	rest, rawQuery, _ := strings.Cut(rest, "?")
	hosts, name, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		if err := sentinelUser(&opt, hosts[:at]); err != nil {
			return opt, err
		}
		hosts = hosts[at+1:]
	}
	if strings.TrimSpace(hosts) == "" {
		return opt, errors.New("no sentinel hosts (want redis-sentinel://host:port[,host:port…]/MASTER)")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		hp, err := sentinelHost(strings.TrimSpace(h))
		if err != nil {
			return opt, err
		}
		opt.InitAddress = append(opt.InitAddress, hp)
	}
	if name == "" || strings.Contains(name, "/") {
		return opt, fmt.Errorf("master name %q: want exactly one path element, the master set the sentinels monitor (redis-sentinel://host:port/MASTER)", name)
	}
	opt.Sentinel.MasterSet = name
	return opt, sentinelQuery(&opt, rawQuery)
}

// sentinelUser reads the master's credentials, user:pass or :pass
// (percent-encoded as in a URL).
func sentinelUser(opt *rueidis.ClientOption, info string) error {
	user, pass, _ := strings.Cut(info, ":")
	var err error
	if opt.Username, err = url.PathUnescape(user); err != nil {
		return fmt.Errorf("user name: %w", err)
	}
	if opt.Password, err = url.PathUnescape(pass); err != nil {
		return errors.New("password: bad percent-encoding")
	}
	return nil
}

// sentinelHost checks one sentinel's host[:port].
func sentinelHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("an empty sentinel host in the list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = h, defaultSentinelPort
		if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
			return "", fmt.Errorf("sentinel %q: %w", h, err)
		}
		host = strings.Trim(host, "[]")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("sentinel %q: bad port %q", h, port)
	}
	if host == "" {
		return "", fmt.Errorf("sentinel %q: no host", h)
	}
	return net.JoinHostPort(host, port), nil
}

// sentinelQuery reads a redis-sentinel address's query: db,
// sentinel_username, sentinel_password; anything else is an error.
func sentinelQuery(opt *rueidis.ClientOption, raw string) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	for k, v := range q {
		val := v[len(v)-1]
		switch k {
		case "db":
			if opt.SelectDB, err = strconv.Atoi(val); err != nil || opt.SelectDB < 0 {
				return fmt.Errorf("db %q: want a database number", val)
			}
		case "sentinel_username":
			opt.Sentinel.Username = val
		case "sentinel_password":
			opt.Sentinel.Password = val
		default:
			return fmt.Errorf("unknown parameter %q (known: db, sentinel_username, sentinel_password)", k)
		}
	}
	return nil
}
