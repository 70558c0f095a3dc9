//! `/ui` in a real browser: headless Debian `chromium`, driven over the DevTools protocol by
//! `tests/browser/cdp.mjs` (node), loads the page from an in-process gateway and the test
//! asserts what a person would see: an election's leader appearing, the waiter count rising
//! (waiters on another gateway of the fleet included), a lock's holder and waiter, the leader
//! changing on a resign. It prints the page's update latency
//! (change made → visible in the page) and saves a screenshot (to `$ZKGATE_UI_SCREENSHOT`, e.g.
//! `docs/ui.png`, else under the target directory).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate_testkit::*;

/// The path of an installed tool. Missing: a failure under CI, else a loud skip (`None`).
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
        assert!(
            !ci,
            "`{name}` is not installed: CI must install `{package}`"
        );
        let _ = writeln!(
            std::io::stderr(),
            "\n******** SKIPPED: `{name}` is not installed (apt-get install -y {package}); \
             this test checks nothing without it ********\n"
        );
    }
    found
}

/// The browser, driven line by line.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Browser {
    fn open(node: &Path, chromium: &Path, url: &str) -> Browser {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/cdp.mjs");
        let mut child = Command::new(node)
            .arg("--experimental-websocket")
            .arg("--no-warnings")
            .arg(script)
            .arg(chromium)
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start node");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut b = Browser {
            child,
            stdin,
            lines,
        };
        assert_eq!(b.answer(), "ready");
        b
    }

    fn answer(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the browser driver answers")
    }

    fn command(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.answer()
    }

    /// Waits until `js` is truthy in the page; panics with `what` otherwise.
    fn wait(&mut self, what: &str, js: &str) {
        let a = self.command(&format!("wait {js}"));
        assert!(
            a.starts_with("ok "),
            "{what}: the page never showed it ({a})"
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cell of a name's row, as the page shows it.
fn cell(table: &str, name: &str, class: &str, text: &str) -> String {
    format!(
        "(() => {{ const r = document.querySelector('#{table} tr[data-name=\"{name}\"]'); \
         return !!r && r.querySelector('.{class}').textContent === '{text}'; }})()"
    )
}

/// Makes a change, then waits until the page shows it (the driver polls every 5 ms): the
/// time from the change's completion (its RPC answered) to the page showing it.
async fn timed<F: std::future::Future>(
    b: &mut Browser,
    what: &str,
    js: &str,
    change: F,
) -> (F::Output, Duration) {
    let out = change.await;
    let done = Instant::now();
    b.wait(what, js);
    (out, done.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_leaders_waiters_holders_and_changes_live() {
    let (Some(chromium), Some(node)) = (tool("chromium", "chromium"), tool("node", "nodejs"))
    else {
        return;
    };
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    // A second gateway of the fleet: the page on the first shows its streams too.
    let other_gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            root: Some(gw.root.clone()),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut c2 = other_gw.client().await;
    let mut l2 = other_gw.lock_client().await;
    let mut l = gw.lock_client().await;
    let url = format!("http://{}/ui?prefix=shop.", gw.http);
    let mut b = tokio::task::block_in_place(|| Browser::open(&node, &chromium, &url));
    b.wait(
        "the page goes live",
        "document.getElementById('status').textContent === 'live'",
    );
    let mut latencies = Vec::new();

    // A leader appears.
    let (mut alice, t) = timed(
        &mut b,
        "alice leads",
        &cell("elections", "shop.orders", "leader", "alice"),
        async {
            let mut a = Campaign::join(&mut c, "shop.orders", "alice", b"").await;
            a.elected().await;
            a
        },
    )
    .await;
    latencies.push(("leader appears", t));
    // Waiters: the count rises.
    let (bob, t) = timed(
        &mut b,
        "one waiter",
        &cell("elections", "shop.orders", "waiting", "1"),
        Campaign::join(&mut c, "shop.orders", "bob", b""),
    )
    .await;
    latencies.push(("waiter count rises", t));
    let (dave, t) = timed(
        &mut b,
        "two waiters, one through the other gateway",
        &cell("elections", "shop.orders", "waiting", "2"),
        Campaign::join(&mut c2, "shop.orders", "dave", b""),
    )
    .await;
    latencies.push(("waiter on another gateway", t));
    // A lock and its holder.
    let (carol, t) = timed(
        &mut b,
        "carol holds the lock",
        &cell("locks", "shop.stock", "holders", "carol"),
        async {
            let mut h = Acquisition::open(&mut l, acquire_msg("shop.stock", "carol")).await;
            h.acquired().await;
            h
        },
    )
    .await;
    latencies.push(("lock holder appears", t));
    // A waiter for the lock, through the other gateway.
    let (frank, t) = timed(
        &mut b,
        "a lock waiter on the other gateway",
        &cell("locks", "shop.stock", "waiting", "1"),
        Acquisition::open(&mut l2, acquire_msg("shop.stock", "frank")),
    )
    .await;
    latencies.push(("lock waiter on another gateway", t));
    // Another prefix's names stay off the page.
    let mut other = Campaign::join(&mut c, "admin.jobs", "eve", b"").await;
    other.elected().await;

    // A resign: bob leads, one waiter left.
    let (_, t) = timed(
        &mut b,
        "bob leads after alice resigns",
        &cell("elections", "shop.orders", "leader", "bob"),
        async {
            alice.send(Req::Resign(pb::ResignCandidacy {})).await;
            alice.expect_end(None).await;
        },
    )
    .await;
    latencies.push(("leader changes on a resign", t));
    b.wait(
        "one waiter after the hand-over",
        &cell("elections", "shop.orders", "waiting", "1"),
    );
    b.wait(
        "the resign in the recent changes",
        "document.getElementById('recent').textContent.includes('shop.orders: bob elected')",
    );
    let a = tokio::task::block_in_place(|| {
        b.command("eval document.body.innerText.includes('admin.jobs')")
    });
    assert_eq!(a, "value false", "the prefix filter leaves admin.jobs out");

    let shot = std::env::var_os("ZKGATE_UI_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui.png"));
    let a = tokio::task::block_in_place(|| b.command(&format!("shot {}", shot.display())));
    assert_eq!(a, "ok");
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 1000,
        "a real screenshot"
    );
    for (what, t) in &latencies {
        eprintln!(
            "/ui update latency, {what}: {} ms (RPC answered -> visible, 5 ms polling)",
            t.as_millis()
        );
    }
    eprintln!("screenshot: {}", shot.display());
    drop((bob, dave, carol, frank, other));
}
