"""The README's screenshot of the web page (docs/serving.png): ``attnlab serve``'s page in headless Chromium
with a fill-mask answer and the attention view (layer 0, ``--head``), token 5 hovered.

    .venv/bin/python docs/serving_screenshot.py MODEL_DIR [--out docs/serving.png]

MODEL_DIR: a masked-LM model directory (the README's picture: `attnlab pretrain` on ../shared/data/books,
30 minutes, the model experiments/pretrain_then_finetune.py pre-trains). Needs chromium and chromedriver.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.serving.app import create_app
from attnlab.serving.server import BackgroundServer
from attnlab.serving.service import load_service


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--out", default="docs/serving.png")
    ap.add_argument("--text", default="She opened the [MASK] and walked into the garden.")
    ap.add_argument("--head", type=int, default=1, help="the head of layer 0 to show")
    ap.add_argument("--attention", default="The children played in the garden until it was dark.")
    args = ap.parse_args()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,1500"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    try:
        with BackgroundServer(create_app(load_service(args.model))) as url:
            driver.get(url + "/")
            WebDriverWait(driver, 30).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
            )
            for name, text in (("fill-mask", args.text), ("attention", args.attention)):
                box = driver.find_element(By.ID, f"{name}-text")
                box.clear()
                box.send_keys(text)
                driver.find_element(By.CSS_SELECTOR, f"#form-{name} button[type=submit]").click()
                result = driver.find_element(By.ID, f"result-{name}")
                WebDriverWait(driver, 30).until(lambda d, r=result: r.get_attribute("data-state") == "done")
            driver.execute_script("document.getElementById('panel-embed').hidden = true;")
            driver.find_elements(By.CSS_SELECTOR, ".attn-cell")[args.head].click()  # layer 0, this head
            token = driver.find_elements(By.CSS_SELECTOR, ".attn-token")[5]
            ActionChains(driver).move_to_element(token).perform()
            time.sleep(0.3)
            driver.save_screenshot(args.out)
    finally:
        driver.quit()
    print(f"wrote {args.out} ({Path(args.out).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
