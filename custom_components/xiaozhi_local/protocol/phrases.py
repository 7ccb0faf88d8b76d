"""Wake phrases a MultiNet model can hear: English words for ``mn*_en``, pinyin syllables for ``mn*_cn``.

MultiNet 6 and 7 (esp-sr) turn a command into phonemes before listening for it: an English model
spells English words out (letters only), a Chinese model reads pinyin, one syllable per word, with
an optional tone digit (``ni3 hao3``; ``ü`` written ``v``). A phrase in the other form is never
heard, so it is refused with the reason instead of being sent to the device.
"""

import re
from typing import Final

_SYLLABLES: Final = """
a ai an ang ao e ei en eng er o ou
ba bai ban bang bao bei ben beng bi bian biao bie bin bing bo bu
pa pai pan pang pao pei pen peng pi pian piao pie pin ping po pou pu
ma mai man mang mao me mei men meng mi mian miao mie min ming miu mo mou mu
fa fan fang fei fen feng fo fou fu
da dai dan dang dao de dei den deng di dia dian diao die ding diu dong dou du duan dui dun duo
ta tai tan tang tao te tei teng ti tian tiao tie ting tong tou tu tuan tui tun tuo
na nai nan nang nao ne nei nen neng ni nian niang niao nie nin ning niu nong nou nu nuan nun nuo nv nve
la lai lan lang lao le lei leng li lia lian liang liao lie lin ling liu lo long lou lu luan lun luo lv lve
ga gai gan gang gao ge gei gen geng gong gou gu gua guai guan guang gui gun guo
ka kai kan kang kao ke kei ken keng kong kou ku kua kuai kuan kuang kui kun kuo
ha hai han hang hao he hei hen heng hong hou hu hua huai huan huang hui hun huo
ji jia jian jiang jiao jie jin jing jiong jiu ju juan jue jun
qi qia qian qiang qiao qie qin qing qiong qiu qu quan que qun
xi xia xian xiang xiao xie xin xing xiong xiu xu xuan xue xun
zha zhai zhan zhang zhao zhe zhei zhen zheng zhi zhong zhou zhu zhua zhuai zhuan zhuang zhui zhun zhuo
cha chai chan chang chao che chen cheng chi chong chou chu chua chuai chuan chuang chui chun chuo
sha shai shan shang shao she shei shen sheng shi shou shu shua shuai shuan shuang shui shun shuo
ran rang rao re ren reng ri rong rou ru rua ruan rui run ruo
za zai zan zang zao ze zei zen zeng zi zong zou zu zuan zui zun zuo
ca cai can cang cao ce cen ceng ci cong cou cu cuan cui cun cuo
sa sai san sang sao se sen seng si song sou su suan sui sun suo
ya yan yang yao ye yi yin ying yo yong you yu yuan yue yun
wa wai wan wang wei wen weng wo wu
"""
PINYIN: Final = frozenset(_SYLLABLES.split())
"""Every syllable of standard Mandarin, without tones (``ü`` as ``v``)."""
_TONED: Final = re.compile(r"^([a-z]+)([1-5]?)$")
_NOT_ENGLISH: Final = ("iao", "ian", "iu", "uo", "ui", "ao")
_ENGLISH: Final = re.compile(r"^[a-z]+(?:'[a-z]+)?$")


def language_of(model: str) -> str | None:
    """``en`` or ``cn`` by a MultiNet model's name (``mn7_en``, ``mn6_cn_ac``, ``mn5q8_cn``)."""
    parts = model.lower().split("_")
    return "en" if "en" in parts[1:] else "cn" if "cn" in parts[1:] else None


def is_pinyin(word: str) -> bool:
    """Whether ``word`` is one pinyin syllable (``xiao``, ``xiao3``, ``lü``/``lv``)."""
    match = _TONED.match(word.lower().replace("ü", "v").replace("u:", "v"))
    return match is not None and match.group(1) in PINYIN


def phrase_problem(command: str, model: str) -> str | None:
    """Why the MultiNet model ``model`` would never hear ``command``; None when it can."""
    words = command.split()
    language = language_of(model)
    if not words:
        return "the phrase is empty"
    if language == "cn":
        wrong = next((word for word in words if not is_pinyin(word)), None)
        if wrong is not None:
            return f"{wrong[:32]!r} is not a pinyin syllable; {model} listens for pinyin (ni3 hao3 xiao3 zhi4)"
    elif language == "en":
        wrong = next((word for word in words if not _ENGLISH.match(word.lower())), None)
        if wrong is not None:
            return f"{wrong[:32]!r} is not an English word; {model} listens for English words (hey willow)"
        if all(is_pinyin(word) for word in words) and any(not _is_english_looking(word) for word in words):
            return f"{command[:64]!r} is pinyin; {model} listens for English words (hey willow)"
    return None


def _is_english_looking(word: str) -> bool:
    """A pinyin syllable that is also an everyday English word, or spelled as English ones are.

    ``x`` and ``q`` start no English word of a wake phrase, and English has no ``iao``/``zh``/``ian``.
    """
    word = word.lower()
    return not word.startswith(("x", "q", "zh")) and not any(part in word for part in _NOT_ENGLISH)
