"""The web console in a real browser (issue 29, test 2): Debian's headless Chromium, driven by
Selenium through Debian's chromedriver (nothing downloaded), creates a topic, produces a record,
finds it in the message browser, watches a consumer group's lag go to zero and resets its
offsets, all through the page. A screenshot of each page goes to build/artifacts/console/.

Marker ``browser`` (``make browser`` installs chromium and chromium-driver with apt); skipped
with a reason when /usr/bin/chromium or Selenium is missing."""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer

from kesque.testing.broker import Broker

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = pathlib.Path(__file__).resolve().parent.parent / "build" / "artifacts" / "console"

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # skipped by a mark, not at import: the default suite deselects this file quietly
    webdriver = None

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(webdriver is None, reason="selenium missing (make browser installs it)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} missing (make browser installs it)"),
    pytest.mark.skipif(not os.path.exists(CHROMEDRIVER), reason=f"{CHROMEDRIVER} missing (make browser installs it)"),
]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    b = Broker(
        data_dir=str(tmp_path_factory.mktemp("browser") / "d"),
        mode="thread",
        config={"console.listener": "http://127.0.0.1:0"},
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager never fetches a driver or a browser
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    try:
        yield d
    finally:
        d.quit()


def shot(d, name: str) -> None:
    assert "Traceback" not in d.page_source
    d.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def go(d, by, what) -> None:
    """Click a link or a form's button and wait for the next page (a click returns before it loads)."""
    old = d.find_element(By.TAG_NAME, "html").id
    d.find_element(by, what).click()
    WebDriverWait(d, 30).until(lambda _: new_page(d, old))


def new_page(d, old: str) -> bool:
    """The document is another than the one whose root element was ``old`` (chromedriver may
    answer a check on the old root with a WebDriverException rather than a stale reference)."""
    try:
        return d.find_element(By.TAG_NAME, "html").id != old
    except WebDriverException:
        return False


def until(predicate, timeout: float, what: str, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_console_in_chromium(node, browser):
    d = browser
    url = node._server.console.url.rstrip("/")
    d.get(url + "/")
    assert d.find_element(By.TAG_NAME, "h1").text == "Topics"
    shot(d, "01-topics")

    # create a topic through the form
    d.find_element(By.ID, "create-name").send_keys("browser-topic")
    go(d, By.CSS_SELECTOR, "form.create-topic button")
    assert d.find_element(By.ID, "note").text == "Created topic browser-topic."
    assert d.find_element(By.TAG_NAME, "h1").text == "Topic browser-topic"
    # alter a config through the form
    d.find_element(By.CSS_SELECTOR, "form.alter-config input[name=key]").send_keys("retention.ms")
    d.find_element(By.CSS_SELECTOR, "form.alter-config input[name=value]").send_keys("3600000")
    go(d, By.CSS_SELECTOR, "form.alter-config button")
    assert d.find_element(By.ID, "note").text == "Altered retention.ms of topic browser-topic."
    cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, "#configs td")]
    assert cells == ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"]
    shot(d, "02-topic")

    # produce records through the message browser's form, find the first by search
    go(d, By.LINK_TEXT, "messages")
    for i, value in enumerate(["hello from chromium", "<script>alert(1)</script>", "third"]):
        d.find_element(By.ID, "produce-key").send_keys(f"k{i}")
        d.find_element(By.ID, "produce-value").send_keys(value)
        go(d, By.CSS_SELECTOR, "form.produce button")
        assert d.find_element(By.ID, "note").text == f"Produced a record to browser-topic-0 at offset {i}."
    box = d.find_element(By.NAME, "offset")
    box.clear()
    box.send_keys("0")
    d.find_element(By.NAME, "q").send_keys("chromium")
    go(d, By.CSS_SELECTOR, "form.browse button")
    rows = d.find_elements(By.CSS_SELECTOR, "#records tr.record")
    assert [r.find_element(By.CSS_SELECTOR, "td.value").text for r in rows] == ["hello from chromium"]
    d.find_element(By.NAME, "q").clear()
    go(d, By.CSS_SELECTOR, "form.browse button")
    values = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#records td.value")]
    assert values == ["hello from chromium", "<script>alert(1)</script>", "third"]  # shown as text, not run
    shot(d, "03-messages")

    # a consumer group reads them, slowly: its lag on the page goes to zero
    stop = threading.Event()
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap_servers,
            "group.id": "browser-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["browser-topic"])

    def consume():
        while not stop.is_set():
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                consumer.commit(m, asynchronous=False)
                time.sleep(0.5)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    try:
        lags = []

        def lag_zero():
            d.get(url + "/groups/browser-group")
            if d.find_elements(By.ID, "total-lag"):
                lags.append(int(d.find_element(By.ID, "total-lag").text))
            return lags and lags[-1] == 0 and d.find_elements(By.CSS_SELECTOR, "#members tr td")

        until(lag_zero, 60, "the group's lag to reach zero")
        shot(d, "04-group-consuming")
    finally:
        stop.set()
        t.join(10)
        consumer.close()

    # the group is empty now: reset its offsets to the earliest through the form
    def reset_form():
        d.get(url + "/groups/browser-group")
        return d.find_elements(By.CSS_SELECTOR, "form.reset-offsets")

    until(reset_form, 30, "the reset form of the emptied group")
    Select(d.find_element(By.NAME, "to")).select_by_visible_text("earliest")
    go(d, By.CSS_SELECTOR, "form.reset-offsets button")
    assert d.find_element(By.ID, "note").text == "Reset 1 partitions of group browser-group to earliest."
    assert d.find_element(By.ID, "total-lag").text == "3"
    assert [e.text for e in d.find_elements(By.CSS_SELECTOR, "#lag td.lag")] == ["3"]
    shot(d, "05-group-reset")

    go(d, By.LINK_TEXT, "Consumer groups")
    assert d.find_element(By.LINK_TEXT, "browser-group")
    shot(d, "06-groups")
    for link, name in (
        ("Overview", "07-overview"),  # one broker: nothing under-replicated or offline
        ("Transactions", "08-transactions"),
        ("Share groups", "09-share-groups"),
        ("Quotas", "10-quotas"),
    ):
        go(d, By.LINK_TEXT, link)
        assert d.find_element(By.TAG_NAME, "h1").text == link
        assert not d.find_elements(By.ID, "error")
        if link == "Overview":
            assert d.find_element(By.ID, "health").text == "Under-replicated: 0 · offline: 0"
        shot(d, name)
    # the charts draw from /api/stats once two polls are in
    go(d, By.LINK_TEXT, "Charts")
    until(lambda: d.find_elements(By.CSS_SELECTOR, "#chart-throughput polyline"), 20, "the throughput chart")
    until(lambda: d.find_elements(By.CSS_SELECTOR, "#chart-lag text[data-series='browser-group']"), 20, "lag series")
    shot(d, "11-charts")
    # a page asking for what is not there
    d.get(url + "/topics/browser-topic/messages?partition=0&offset=-5")
    assert d.find_element(By.ID, "error").text == "offset must be at least 0, not -5."
    d.get(url + "/topics/none-such")
    assert d.find_element(By.ID, "error").text == "Topic none-such does not exist."
    shot(d, "12-missing-topic")
    # delete a topic: the page asks first; dismissed, nothing happens; accepted, it is gone
    d.get(url + "/")
    d.find_element(By.ID, "create-name").send_keys("short-lived")
    go(d, By.CSS_SELECTOR, "form.create-topic button")
    d.find_element(By.CSS_SELECTOR, "form.delete-topic button").click()
    d.switch_to.alert.dismiss()
    assert d.find_element(By.TAG_NAME, "h1").text == "Topic short-lived"
    old = d.find_element(By.TAG_NAME, "html").id
    d.find_element(By.CSS_SELECTOR, "form.delete-topic button").click()
    d.switch_to.alert.accept()
    WebDriverWait(d, 30).until(lambda _: new_page(d, old))
    assert d.find_element(By.ID, "note").text == "Deleted topic short-lived."
    until(lambda: d.get(url + "/") or "short-lived" not in d.find_element(By.ID, "topics").text, 20, "the delete")
    assert sorted(p.name for p in ARTIFACTS.iterdir()) == sorted(
        f"{n}.png"
        for n in (
            "01-topics",
            "02-topic",
            "03-messages",
            "04-group-consuming",
            "05-group-reset",
            "06-groups",
            "07-overview",
            "08-transactions",
            "09-share-groups",
            "10-quotas",
            "11-charts",
            "12-missing-topic",
        )
    )
