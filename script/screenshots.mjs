// Take the screenshots in docs/ (run by script/screenshots, which starts HA and onboards it).
// node screenshots.mjs BASE TOKENS_JSON OUT_DIR CODE DEVICE_ID
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(`${process.env.NODE_PATH}/`);
const { chromium } = require("playwright-core");

const [base, tokensPath, out, code, deviceId] = process.argv.slice(2);
const tokens = JSON.parse(readFileSync(tokensPath, "utf8"));

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
const context = await browser.newContext({
  viewport: { width: 1280, height: 860 },
  colorScheme: "light",
  locale: "en-US",
});
await context.addInitScript((stored) => {
  window.localStorage.setItem("hassTokens", JSON.stringify(stored));
  window.localStorage.setItem("selectedLanguage", JSON.stringify("en"));
}, tokens);
const page = await context.newPage();

async function open(path, text) {
  await page.goto(base + path);
  await page.getByText(text).first().waitFor({ timeout: 60000 });
  await page.waitForTimeout(2000); // icons, images and late states
}

async function shot(name, fullPage = false) {
  await page.screenshot({ path: `${out}/${name}.png`, fullPage });
  console.log(`${out}/${name}.png`);
}

// The integrations dashboard: the Xiaozhi Local card and the "wants to join" discovery card.
await open("/config/integrations/dashboard", "wants to join");
await shot("discovered");

// The integration's page: the hub entry and its devices.
await open("/config/integrations/integration/xiaozhi_local", "Simulated xiaozhi");
await shot("integration");

// The code entry: the discovery card's Add, the code the device speaks typed in.
await open("/config/integrations/dashboard", "wants to join");
await page.getByRole("button", { name: "Add", exact: true }).first().click();
const dialog = page.locator("dialog-data-entry-flow");
await dialog.getByRole("textbox").first().fill(code);
await page.waitForTimeout(1000);
await shot("code-entry");
await page.keyboard.press("Escape");
await page.waitForTimeout(500);

// The Reply speaker select of the paired device (its answer played on the living room's
// speaker, the Response time shows it), its options open: the media players to choose from.
await open(`/config/devices/device/${deviceId}`, "Reply speaker");
const replySpeaker = page.locator("ha-select", { hasText: "Reply speaker" }).first();
await replySpeaker.scrollIntoViewIfNeeded();
await page.mouse.wheel(0, 300); // its options open below it
await page.waitForTimeout(500);
await replySpeaker.click();
await page.waitForTimeout(1500);
await shot("reply-speaker");
await page.keyboard.press("Escape");
await page.waitForTimeout(500);

// The paired device's page, with its entities.
await open(`/config/devices/device/${deviceId}`, "Volume");
await shot("device", true);

// The paired device's firmware: the demo's 2.5.0 image offered to its 2.4.2, in the update dialog.
await open(`/config/devices/device/${deviceId}`, "Update available");
await page.getByText("Update available").first().click();
await page.waitForTimeout(4000); // the dialog opens, then its release notes load
await shot("update");
await page.keyboard.press("Escape");
await page.waitForTimeout(500);

// The Wake word select of the paired device, its options open.
await open(`/config/devices/device/${deviceId}`, "Wake word");
const wakeWord = page.locator("ha-select", { hasText: "Wake word" }).first();
await wakeWord.scrollIntoViewIfNeeded();
await page.mouse.wheel(0, 300); // the select near the top: its options open below it
await page.waitForTimeout(500);
await wakeWord.click();
await page.waitForTimeout(1500);
await shot("wake-word");
await page.keyboard.press("Escape");
await page.waitForTimeout(500);

// The Response time of the paired device after its answers, in its Diagnostic card.
await open(`/config/devices/device/${deviceId}`, "Response time");
await page.getByText("Response time").first().scrollIntoViewIfNeeded();
await page.mouse.wheel(0, 300); // the card in the middle, with the settings above it
await page.waitForTimeout(500);
await shot("response-time");

// Activity: the two devices heard one wake word, the nearer one answered.
await open("/logbook", "as the nearest");
await page.getByText("as the nearest").first().scrollIntoViewIfNeeded();
await page.mouse.wheel(0, 200); // the entry mid-page, with what happened around it
await page.waitForTimeout(1000);
await shot("nearest");

// Voice assistants: the device among the assistants' devices.
await open("/config/voice-assistants/assistants", "Assist");
await shot("voice-assistants");

await browser.close();
