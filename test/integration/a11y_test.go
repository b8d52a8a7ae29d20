package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The pages of the real leasemgr on a single node, in headless Chromium
// (TestWebUI says how it is driven), with a holder and a waiter: axe-core
// finds no serious or critical violation on / and on /cluster; a pool row
// of /cluster is reached with Tab and opened with Enter; and a live
// holder's "expires in" is within its TTL, and stays so across its
// renewals (issue 31). TestOperatorClusterPage does the same on the
// serving node of three.
func TestPagesAccessibleOnOneNode(t *testing.T) {
	t.Parallel()
	chromium := ensureChromium(t)
	env, httpAddr := managerEnv(t, "solo", "gpu=1,cpu=4", "15s")
	startManager(t, env, httpAddr)
	holder := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "120")
	eventually(t, 20*time.Second, "the holder's grant", func() bool { return strings.Contains(holder.Output(), "granted") })
	granted := time.Now()
	start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 10*time.Second, "the waiter to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })

	b := startBrowser(t, chromium)
	page := b.newPage(t)
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}, nil)

	page.call(t, "Page.navigate", map[string]any{"url": "http://" + httpAddr + "/"}, nil)
	eventually(t, 15*time.Second, "the node's page to show its pools", func() bool {
		st := page.state(t)
		return st.Mode == "live" && st.Node == "solo" && st.GPU == "1"
	})
	axeCheck(t, page, "/")

	page.call(t, "Page.navigate", map[string]any{"url": "http://" + httpAddr + "/cluster"}, nil)
	var st clusterState
	eventually(t, 15*time.Second, "the cluster page to show this node's pools", func() bool {
		st = page.clusterState(t)
		return st.Mode == "live" && st.Nodes["solo"] == "0" && st.row("solo", "gpu") != nil
	})
	axeCheck(t, page, "/cluster")
	keyboardOpens(t, page, "solo/gpu")
	eventually(t, 5*time.Second, "solo/gpu's holder and waiter", func() bool {
		st = page.clusterState(t)
		return st.Detail == "solo/gpu" && len(st.Holders) == 1 && len(st.Waiters) == 1
	})
	axeCheck(t, page, "/cluster with a pool open")

	// The holder renews every 5s (TTL/3): until well past a TTL after its
	// grant, "expires in" stays above 0 and at most the TTL (it stayed at
	// grant + TTL: 0s, then blank).
	for time.Since(granted) < 20*time.Second {
		s, _ := page.eval(t, `(document.querySelector('#holders tbody tr [data-field="expires"]') || {}).textContent || ''`).(string)
		secs, err := strconv.Atoi(strings.TrimSuffix(s, "s"))
		if err != nil || secs <= 0 || secs > 15 {
			t.Fatalf("a live holder (TTL 15s), %v after its grant, shows expires in %q", time.Since(granted).Round(time.Second), s)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if ex := b.exceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}

// keyboardOpens presses Tab until the pool row of key has the focus, and
// opens it with Enter.
func keyboardOpens(t *testing.T, p *cdpPage, key string) {
	t.Helper()
	p.eval(t, `document.activeElement && document.activeElement.blur(), window.focus()`)
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatalf("Tab never reached the pool row %s", key)
		}
		p.key(t, "Tab")
		if p.eval(t, `(() => { const r = document.activeElement && document.activeElement.closest('tr.pool-row'); return r ? r.dataset.key : ''; })()`) == key {
			break
		}
	}
	p.key(t, "Enter")
	eventually(t, 5*time.Second, "Enter to open "+key, func() bool {
		return p.eval(t, `document.getElementById('detail').hidden ? '' : document.getElementById('detail-name').textContent`) == key
	})
}

// key presses and releases one key (DevTools Input.dispatchKeyEvent).
func (p *cdpPage) key(t *testing.T, name string) {
	t.Helper()
	codes := map[string]int{"Tab": 9, "Enter": 13, " ": 32}
	for _, typ := range []string{"rawKeyDown", "keyUp"} {
		params := map[string]any{"type": typ, "key": name, "code": name, "windowsVirtualKeyCode": codes[name], "nativeVirtualKeyCode": codes[name]}
		if name == "Enter" && typ == "rawKeyDown" {
			p.call(t, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Enter", "code": "Enter", "text": "\r", "windowsVirtualKeyCode": 13}, nil)
			continue
		}
		p.call(t, "Input.dispatchKeyEvent", params, nil)
	}
}
