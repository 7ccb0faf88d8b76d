"""Draw the brand images in ``custom_components/xiaozhi_local/brand/`` (run: .venv/bin/python script/brand.py).

Home Assistant serves them for the integration (``/api/brands/integration/xiaozhi_local/…``):
the icon (256 and 512 px squares) and the logo (landscape, with the name). A voice bubble whose
inside is a house with a sound wave: the house answers the device. Drawn at 4x, then scaled down.
"""

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

BRAND = Path(__file__).parent.parent / "custom_components" / "xiaozhi_local" / "brand"
TOP = (30, 136, 229)  # blue
BOTTOM = (0, 191, 165)  # teal
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
SCALE = 4


def gradient(size: int) -> Image.Image:
    """A top-to-bottom blend of the two brand colours."""
    column = Image.new("RGBA", (1, size))
    for y in range(size):
        t = y / (size - 1)
        column.putpixel((0, y), (*(round(a + (b - a) * t) for a, b in zip(TOP, BOTTOM, strict=True)), 255))
    return column.resize((size, size))


def icon(size: int) -> Image.Image:
    """The square icon at ``size`` pixels."""
    big = size * SCALE
    unit = big / 256  # draw in a 256-unit square

    def box(*xy: float) -> list[float]:
        return [v * unit for v in xy]

    mask = Image.new("L", (big, big), 0)
    ImageDraw.Draw(mask).rounded_rectangle(box(8, 8, 248, 248), radius=56 * unit, fill=255)
    out = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    out.paste(gradient(big), (0, 0), mask)
    draw = ImageDraw.Draw(out)
    white = (255, 255, 255, 255)
    # The speech bubble and its tail.
    draw.rounded_rectangle(box(40, 46, 216, 182), radius=44 * unit, fill=white)
    draw.polygon(box(70, 170, 60, 214, 112, 178), fill=white)
    # A house inside it: the roof, the walls.
    ink = (*TOP, 255)
    draw.line(box(70, 110, 128, 64, 186, 110), fill=ink, width=round(14 * unit), joint="curve")
    draw.rounded_rectangle(box(84, 102, 172, 166), radius=10 * unit, outline=ink, width=round(10 * unit))
    # A sound wave in the house: five bars.
    teal = (*BOTTOM, 255)
    for x, half in ((104, 5), (116, 12), (128, 19), (140, 12), (152, 5)):
        draw.rounded_rectangle(box(x - 4, 135 - half, x + 4, 135 + half), radius=4 * unit, fill=teal)
    return out.resize((size, size), Image.Resampling.LANCZOS)


def logo(height: int) -> Image.Image:
    """The icon and the name beside it, ``height`` pixels high, trimmed."""
    big = height * SCALE
    font = ImageFont.truetype(str(FONT), round(big * 0.42))
    text = "Xiaozhi Local"
    left, top, right, bottom = font.getbbox(text)
    gap = big // 6
    out = Image.new("RGBA", (big + gap + right - left, big), (0, 0, 0, 0))
    out.paste(icon(big), (0, 0))
    ImageDraw.Draw(out).text(
        (big + gap - left, (big - (bottom - top)) // 2 - top), text, font=font, fill=(33, 33, 33, 255)
    )
    return out.resize((out.width // SCALE, height), Image.Resampling.LANCZOS)


def main() -> None:
    """Write the images."""
    BRAND.mkdir(exist_ok=True)
    icon(256).save(BRAND / "icon.png", optimize=True)
    icon(512).save(BRAND / "icon@2x.png", optimize=True)
    logo(128).save(BRAND / "logo.png", optimize=True)
    logo(256).save(BRAND / "logo@2x.png", optimize=True)
    for name in ("icon.png", "icon@2x.png", "logo.png", "logo@2x.png"):
        with Image.open(BRAND / name) as image:
            print(name, image.size)


if __name__ == "__main__":
    main()
