"""The web page in a real browser: headless Chromium driven by Selenium against ``attnlab serve`` on a free
127.0.0.1 port (tiny random models). Each test types into the page, submits, waits for the answer and checks
the DOM against the API's JSON for the same input; a screenshot of the page is saved under the test's
output directory (``tmp_path``).

Run with ``pytest -m browser`` (part of the default run too when Chromium is installed: Debian's
``chromium`` and ``chromium-driver``; skipped with the reason otherwise).
"""

from __future__ import annotations

import shutil

import pytest
import torch

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from serving_models import make  # noqa: E402

from attnlab.serving.app import create_app  # noqa: E402
from attnlab.serving.server import BackgroundServer  # noqa: E402
from attnlab.serving.service import load_service  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "browser tests need Chromium and its driver (Debian: apt-get install chromium chromium-driver); "
        f"found chromium={CHROMIUM}, chromedriver={CHROMEDRIVER}",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def driver():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,1400", "--no-first-run", "--disable-extensions"):  # fmt: skip
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    browser.set_page_load_timeout(60)
    yield browser
    browser.quit()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_root(tmp_path_factory):
    return tmp_path_factory.mktemp("browser-models")


def serve(kind: str, root):
    return BackgroundServer(create_app(load_service(make(kind, root))))


def open_page(driver, url: str) -> None:
    driver.get(url + "/")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    sources = [e.get_attribute("src") or e.get_attribute("href") for e in
               driver.find_elements(By.CSS_SELECTOR, "script[src], link[href]")]  # fmt: skip
    assert all(s.startswith(url + "/static/") for s in sources), sources  # offline: nothing from elsewhere


def type_into(driver, element_id: str, text: str) -> None:
    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def submit_and_wait(driver, name: str, timeout: float = 30):
    driver.find_element(By.CSS_SELECTOR, f"#form-{name} button[type=submit]").click()
    result = driver.find_element(By.ID, f"result-{name}")
    WebDriverWait(driver, timeout).until(lambda d: result.get_attribute("data-state") in ("done", "error"))
    assert result.get_attribute("data-state") == "done", result.text
    return result


def visible_panels(driver) -> list[str]:
    return [p.get_attribute("data-endpoint") for p in driver.find_elements(By.CSS_SELECTOR, ".panel")
            if p.is_displayed()]  # fmt: skip


def api(url: str, endpoint: str, body: dict) -> dict:
    import httpx

    r = httpx.post(f"{url}/v1/{endpoint}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_fill_mask_and_attention_view(driver, model_root, tmp_path):
    with serve("mlm", model_root) as url:
        open_page(driver, url)
        assert visible_panels(driver) == ["fill-mask", "embed", "attention"]  # only what the model serves
        text = "the capital of france is [MASK] ."
        type_into(driver, "fill-mask-text", text)
        result = submit_and_wait(driver, "fill-mask")
        items = result.find_elements(By.CSS_SELECTOR, "li.prediction")
        expected = api(url, "fill-mask", {"text": text, "top_k": 5})["predictions"]
        assert [i.find_element(By.CLASS_NAME, "score-label").text for i in items] == [
            p["token"] for p in expected
        ]

        sentence, pair = "paris is a city on the river seine", "alan turing was born in london"
        type_into(driver, "attention-text", sentence)
        type_into(driver, "attention-text-pair", pair)
        result = submit_and_wait(driver, "attention")
        data = api(url, "attention", {"text": sentence, "text_pair": pair})
        tokens = result.find_elements(By.CSS_SELECTOR, ".attn-token")
        assert [t.text for t in tokens] == data["tokens"]  # one element per token
        assert len(result.find_elements(By.CSS_SELECTOR, ".attn-cell")) == data["layers"] * data["heads"]
        lines = result.find_elements(By.CSS_SELECTOR, "svg.attn-links line")
        assert lines
        ActionChains(driver).move_to_element(tokens[3]).perform()  # hover isolates token 3's attention
        WebDriverWait(driver, 5).until(lambda d: "attn-active" in tokens[3].get_attribute("class"))
        rows = {ln.get_attribute("y1") for ln in result.find_elements(By.CSS_SELECTOR, "svg.attn-links line")}
        assert rows == {str(3 * 22 + 11)}
        ActionChains(driver).move_to_element(
            result.find_elements(By.CSS_SELECTOR, ".attn-cell")[-1]
        ).click().perform()
        layer = driver.find_element(By.CSS_SELECTOR, "select.attn-layer-select").get_attribute("value")
        assert layer == str(data["layers"] - 1)  # a model-view click selects that head
        driver.save_screenshot(str(tmp_path / "fill-mask-attention.png"))
        driver.get(url + "/docs")  # the API docs render from the package's copy of Swagger UI, no CDN
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
        paths = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")]
        assert "/v1/fill-mask" in paths and "/v1/qa" not in paths
        sources = [e.get_attribute("src") or e.get_attribute("href") or "" for e in
                   driver.find_elements(By.CSS_SELECTOR, "script[src], link[href]")]  # fmt: skip
        assert sources and all(s.startswith(url) for s in sources), sources
    assert (tmp_path / "fill-mask-attention.png").stat().st_size > 1000


def test_question_answering_highlights_the_answer(driver, model_root, tmp_path):
    with serve("qa", model_root) as url:
        open_page(driver, url)
        assert visible_panels(driver) == ["qa", "embed", "attention"]
        question, context = (
            "where was alan turing born ?",
            "Alan Turing was born in London. He worked at Manchester.",
        )
        type_into(driver, "qa-question", question)
        type_into(driver, "qa-context", context)
        result = submit_and_wait(driver, "qa")
        best = api(url, "qa", {"question": question, "context": context, "top_k": 3})["answers"][0]
        mark = result.find_element(By.CSS_SELECTOR, "mark.answer")
        assert mark.text == best["answer"] == context[best["start"] : best["end"]]
        assert result.find_element(By.CLASS_NAME, "marked-text").text == context
        driver.save_screenshot(str(tmp_path / "qa.png"))


def test_ner_highlights_entities_and_classification_shows_scores(driver, model_root, tmp_path):
    with serve("ner", model_root) as url:
        open_page(driver, url)
        text = "Alan Turing was born in London and worked at Manchester."
        type_into(driver, "ner-text", text)
        result = submit_and_wait(driver, "ner")
        entities = api(url, "ner", {"text": text})["entities"]
        marks = result.find_elements(By.CSS_SELECTOR, "mark.entity")
        assert [(m.get_attribute("data-label"), m.get_attribute("textContent")) for m in marks] == [
            (e["entity_group"], e["word"]) for e in entities
        ]
        driver.save_screenshot(str(tmp_path / "ner.png"))
    with serve("cls", model_root) as url:
        open_page(driver, url)
        type_into(driver, "classify-text", "paris is a city")
        result = submit_and_wait(driver, "classify")
        labels = [e.text for e in result.find_elements(By.CLASS_NAME, "score-label")]
        assert labels == [
            p["label"] for p in api(url, "classify", {"text": "paris is a city"})["predictions"]
        ]
        driver.save_screenshot(str(tmp_path / "classify.png"))


def test_generation_streams_into_the_page(driver, model_root, tmp_path):
    with serve("gpt", model_root) as url:
        open_page(driver, url)
        assert visible_panels(driver) == ["generate", "attention"]
        type_into(driver, "generate-text", "the capital of")
        box = driver.find_element(By.CSS_SELECTOR, "#form-generate input[name=max_new_tokens]")
        box.clear()
        box.send_keys("6")
        result = submit_and_wait(driver, "generate")
        expected = api(url, "generate", {"text": "the capital of", "max_new_tokens": 6})["text"]
        assert result.find_element(By.CLASS_NAME, "generated").get_attribute("textContent") == expected
        driver.save_screenshot(str(tmp_path / "generate.png"))
