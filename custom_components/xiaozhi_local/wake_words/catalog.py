"""esp-sr's WakeNet models that stock firmware loads, each file pinned by its size and SHA-256.

Read from esp-sr's ``model/wakenet_model/`` (HEAD ``7ff63a7``, esp-sr 2.4, which firmware 2.4 builds
with: ``espressif/esp-sr: ~2.4.7``): the 58 ``wn9_*``, 7 ``wn9l_*`` and 5 ``wn9s_*`` folders. The
older ``wn7*``/``wn8*`` ones are left out (esp-sr 2.x has no engine for them). A download is kept
only when every file has the pinned size and digest (files.py), so a cut or changed file
never reaches a device.

Which chips load which family follows esp-sr's ``Kconfig.projbuild`` and the firmware's defaults
(``sdkconfig.defaults.<chip>``): WakeNet 9 and 9l on the ESP32, -S3, -P4 and -S31 (with PSRAM),
WakeNet 9s on the ESP32-C3, -C5 and -C6. Labels are what the select and Home Assistant's voice
settings show; where two models of one family wake on the same word, the second names its folder.
"""

from dataclasses import dataclass
from typing import Final

CHIPS: Final = {
    "9": frozenset({"esp32", "esp32s3", "esp32p4", "esp32s31"}),
    "9s": frozenset({"esp32c3", "esp32c5", "esp32c6"}),
}
"""The chips each WakeNet family runs on (``9l`` is WakeNet 9's larger variant: the same chips)."""


def family_of(name: str) -> str | None:
    """``9``, ``9s`` or None (not a WakeNet 9 model) by a model's folder name, as esp-sr picks its engine."""
    if name.startswith("wn9s_"):
        return "9s"
    if name.startswith(("wn9_", "wn9l_")):
        return "9"
    return None


def chips_of(name: str) -> frozenset[str]:
    """The chips that load the model named ``name`` (none for WakeNet 5, 7, 8 or an unknown name)."""
    family = family_of(name)
    return CHIPS[family] if family is not None else frozenset()


@dataclass(frozen=True, slots=True)
class PinnedFile:
    """A file of a model as esp-sr holds it."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class WakeModel:
    """A WakeNet model of esp-sr that Home Assistant offers."""

    name: str
    """Its folder in esp-sr's ``model/wakenet_model/`` (and in ``xiaozhi_wake_words/``)."""
    label: str
    languages: tuple[str, ...]
    files: tuple[PinnedFile, ...]

    @property
    def chips(self) -> frozenset[str]:
        """The chips it runs on."""
        return chips_of(self.name)

    def pin(self, file: str) -> PinnedFile | None:
        """The pin of one of its files."""
        return next((pinned for pinned in self.files if pinned.name == file), None)


def _parse(table: str) -> tuple[WakeModel, ...]:
    """The models of ``_TABLE``: a line ``name | label | languages``, then a line per file."""
    models: list[WakeModel] = []
    for line in table.strip().splitlines():
        if not line.startswith(" "):
            name, label, languages = (part.strip() for part in line.split("|"))
            models.append(WakeModel(name, label, tuple(languages.split()), ()))
            continue
        file, size, digest = line.split()
        last = models[-1]
        models[-1] = WakeModel(
            last.name, last.label, last.languages, (*last.files, PinnedFile(file, int(size), digest))
        )
    return tuple(models)


_TABLE: Final = """
wn9_alexa | Alexa | en
    _MODEL_INFO_ 35 a93580fe133549f8bb3806317a289d8802721ccfbde87431eff13120e3108a24
    wn9_data 289638 232af46bf553dd832733bb12d0cd4b4027c5b134693870ca6d32a61718c3c7ac
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9_astrolabe_tts | Astrolabe | en
    _MODEL_INFO_ 41 02c0efa77e4baefb244dd02dd95ade88d868eb1b1e47cfee81a121024da81727
    wn9_data 289638 04a9734013c36bf1b2b14021a33b245d80a48bbd2bd63d793c7f861f2651e265
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_bluechip_tts2 | Blue Chip | en
    _MODEL_INFO_ 40 03905a6d04d1faec48f64361dfae1db86caa86f7b4829a1117f3b08c13d4dcd5
    wn9_data 289665 06f9a4a24d7e9e80362dc6fb520ce41cb619484e15ac5e2d195786a150863b4a
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_computer_tts | Computer | en
    _MODEL_INFO_ 40 c65dbc4e2d97369d330ab1eed3467c6036b6772b637dd98127c94418c6564e9b
    wn9_data 289638 4d62d9e39aaa1b10195a0b7efb1f59a98bfd1aca98445e4723b66fbd8c1c9da4
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9_customword | 小爱同学 · wn9_customword | zh
    _MODEL_INFO_ 41 0adda5f3f950d6033f15e822610a50d454a7210a4449b5b3d2f06639ef6998da
    wn9_data 289797 437d0211f2bfad8c77f677ce9896bbb754efb6cf783556264614ec3adeb67f11
    wn9_index 1152 50c9f2c4b66adfa57f32fd76e1c951c4f50d7eccebf22669a5d4bb3a4bec6f91
wn9_hai1xiao3ou1_tts3 | 嗨小欧 | zh
    _MODEL_INFO_ 41 90eb48d2bdb56134bd4acdc3965bfb8b05a29ec1840c56de62c249cd569d337e
    wn9_data 289665 f7668aa0a6f531e882860c29d7f19fb3ac6659c0aa2c80faa7ec2d46eb8a278f
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_hai1xiao3xiang4_tts3 | 嗨小象 | zh
    _MODEL_INFO_ 41 f0498ef4211c438030b8f1149b9e45e2d887e9d0ad298f9864acfb45934327ac
    wn9_data 289665 854f8e6b5aef06d03c64cc52fe0e02de8bfefdc84bbb7e8dbae2cd2444a5645b
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_haixiaowu_tts | Hi 小巫 | zh
    _MODEL_INFO_ 41 c5d6b4cb691839a563deeb04de961e3a5d299ee2c4fae4648e01960d70b68a1b
    wn9_data 289638 47fc4a7b5b2670350f0953a1c6dbbf4f1eef237b3bc06c42fc4ee047b4c14db6
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_heyily_tts2 | Hey Ily | en
    _MODEL_INFO_ 40 dc4db6b880e0d9511575e93c13e2bc61167076650c4ffdd576c82d59fa67a4e8
    wn9_data 289665 3ea182aa12253d6acd3e8c5c48037150568b0f9fcfb8a5bbfc614fce4b25f4a2
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_heyivy_tts2 | Hey Ivy | en
    _MODEL_INFO_ 39 c87ca395892ec9e97e4c8d24cf975f6f10a7e1990ab597f39ef85e5c36da5489
    wn9_data 289665 6e975e4bf6e0fabbcc2b9f7ebcec1f0d4a03f0452bcd10d44147780358798f2a
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_heykira_tts3 | Hey Kira | en
    _MODEL_INFO_ 40 d43f0bb05b7eb485feffeec536649958311ccb9e92ff628dcf12a6e151371124
    wn9_data 289665 c96ded3f473d5d67a8ebd2cea813bfffb2e96991cf038fcd92e1d3f418235723
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_heyprinter_tts | Hey Printer | en
    _MODEL_INFO_ 172 4b4eb4a574c210d99e45977e304e8022b544ddadee0c2904cf882184cd9e2b96
    wn9_data 289638 985d414e353a6ae64b2aff0308ea47605f82af0959cbd7951545178fe2800475
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_heywanda_tts | Hey Wanda | en
    _MODEL_INFO_ 41 095bfa7205693fb49c18f0a6d942a234708f9fe6ac331b4a9bb22b5a48905ec9
    wn9_data 289638 2d3ddf2f2836071c5ff95f6b08b4cfa6ff19a4af5336040a03c81592b0f6294b
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_heywillow_tts | Hey Willow | en
    _MODEL_INFO_ 42 defc60162df4583975f7033a3994206574a8f8376ea2d2d9efc42d92af8ffca6
    wn9_data 289638 f3a661a2ba7d57ab96af8be01f1f3469e2da30bc1693b78fd5efd3114ea25977
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9_hiandy_tts2 | Hi Andy | en
    _MODEL_INFO_ 39 e81f4f3cf9eb9fa6bf4df16fb87a473144d76363eae6844940559d15d8020791
    wn9_data 289665 d74dc9fe6c557b26d9439cac64817e53563a26809fe79800dbb74fde2ec75dfd
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_hiesp | Hi ESP | en
    _MODEL_INFO_ 34 5fa834ea17d00c410bc407f0033b073d93944ad96586e0e437b71d5eb656aa59
    wn9_data 289796 2e9c1f0e7d6ecd8632baef7471896897478e49e49c1c54dcece635f54f456879
    wn9_index 1152 da36d558d0a378c0a7bdd8348a721b5898c2aa9aef27951f613cc71f7cb7c5cd
wn9_hifairy_tts2 | Hi Fairy | en
    _MODEL_INFO_ 40 fe706f1e9580141ffeaff36de4985be5b5de547795f69e1030de1facd0f2ea4a
    wn9_data 289665 415396317be4636d546dab6e4edacc28c70732530878db14196996778db7c4a9
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_hijason_tts2 | Hi Jason | en
    _MODEL_INFO_ 41 bd5b737a2915cd5c55153d208de0610b2c89ab8e941e9ddc4d83e8e605c23e00
    wn9_data 289638 c0c318c1b92a753826d0d7e0897dc4059f67a577a839f137be290400fd65f646
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_hijolly_tts2 | Hi Jolly | en
    _MODEL_INFO_ 40 b60afda42ee880458d3333d6201ef7be43523c1647dc0c3d3725a549fb9cb86f
    wn9_data 289665 ae4f7e02115321065c12d33b28e44c95be980e207f93a57f8e22210324e1ac35
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_hijoy_tts | Hi Joy | en
    _MODEL_INFO_ 38 2bc021ade56df1be648923d4a17eae3bab219d87fbfa6e7c3bd02ec620bb2443
    wn9_data 289638 ad7dbe072d350534fc0d1cbc53b6e61185f392f49d0f29d953d1671b376b8a6e
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_hilexin | Hi 乐鑫 | zh
    _MODEL_INFO_ 41 ac7d629244030b22d48c87324300efe4c66b27df566d82212e46c0f0061e60d7
    wn9_data 289796 901fe90bcff4af61402a52e62d11993a0beac7659ccad355b4fbaa7b23594611
    wn9_index 1152 da36d558d0a378c0a7bdd8348a721b5898c2aa9aef27951f613cc71f7cb7c5cd
wn9_hilili_tts | Hi Lily / Hi 莉莉 | en zh
    _MODEL_INFO_ 52 5c34ae1f34b07def2f6a1367aab041a3c0b6826af553677318f12973dc7cbc70
    wn9_data 289638 3d6f0faa1e0175b98646bf7fe405c8fda29d47fdbaa1f526b2947a18e6949194
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_himfive | Hi M Five | en
    _MODEL_INFO_ 39 67817f58028fdd966530561ac5ef8f7d64778476ba6e99946ad2bdda7fe7c75b
    wn9_data 289638 4d5c94296a48b54e357cee08dd65331b822ec7cadc86ea7155414eee0a5e98f8
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9_himiaomiao_tts | Hi 喵喵 | zh
    _MODEL_INFO_ 41 7a50f272621e2c7fd1907cbd1c1df7bbfe0d8bec5f2eb0dbc4c08fc3803c214d
    wn9_data 289638 8f9a8ecc45d3ac234adc52c4f8b16fd71b8db864684c5d0aa8e25c58e5ef713c
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_histackchan_tts3 | Hi Stack Chan · wn9_histackchan_tts3 | en
    _MODEL_INFO_ 45 96b2615dc51d471796fd5da91330c33733a8ff45ee465692cc630fddbda4572a
    wn9_data 289665 dbba353b4b5cb923984de753012671aa122cd4373739173956d2071ba9618eb3
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_hitelly_tts | Hi Telly / Hi 泰力 | en zh
    _MODEL_INFO_ 41 92abc933699917b47c24ddfa286cb7b9dbf79dadc2c23755afe3d3ed77495232
    wn9_data 289638 c8244b9b10d3d390f1ecef0e36b934e947f065096db1e20bd440c598a7f48fec
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_hiwalle_tts2 | Hi Wall-E / Hi 瓦力 | en zh
    _MODEL_INFO_ 55 ab3d94d383a6174de1ccee4d8c07ea97a2db188ec127d5a266bc639fcb9a963b
    wn9_data 289638 49f3b4622068ba928bae58d3050cc51db31d9dfd449c9868e17d1df8cf306f71
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_hixiaoxing_tts | Hi 小星 | zh
    _MODEL_INFO_ 41 2d9e9645fe1592cae1299202323132d01f4781fb8f8c8432ce609dcb33bea44c
    wn9_data 289638 e6c937f301eeae3a133e7e67739d906130e920f92829bd2fc3d46e504f435ede
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_jarvis_tts | Jarvis | en
    _MODEL_INFO_ 170 ee752fe7bd3eaa78b94e723a4782c2000014508848a53e31222ebe52be2d7970
    wn9_data 289638 221e5d90fb5ce2d14e851f4c9affc0271c5b02e55a10deb671a4243d3ccdcc3f
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9_linaiban_tts2 | 璃奈板 | zh
    _MODEL_INFO_ 41 ad74b98f2e56933ff851d78e63deba46c323dc3148ed946d6a29f58b3ae42731
    wn9_data 289638 d80859dfb3708762d3877ce00b6143f248a62ace842fb4d6d9ed63446c94cee7
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_miaomiaotongxue_tts | 喵喵同学 | zh
    _MODEL_INFO_ 175 05ff7ed07b6ee8fe4338084ac7549a6e81f50b1fb94dc64f7e49eed7b0a89362
    wn9_data 289638 39b92027f150094e1b7cc3212302b3c9ae980674123cf1d061ca04f25ebe6fed
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_mycroft_tts | Mycroft | en
    _MODEL_INFO_ 39 b2ab0beaca3250d714ad0b55a8460b1d178788f9e9c2ad6050a9855991d799d5
    wn9_data 289638 331b953d9d666a1649aa2dcbe8998bc30361a57350ba5de414da6d50def4f970
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_ni3hao3xiao3mai4_tts2 | 你好小脉 | zh
    _MODEL_INFO_ 44 8402de9c4bcfd870ad0d381cc4739ab3fa4e428546b3cefaca3bf949cf36b9f9
    wn9_data 289665 5f2b530d8d242264940f51cc8877393b4991e7f466587fd5904f139091473758
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_ni3hao3xiao3rui4_tts3 | 你好小瑞 | zh
    _MODEL_INFO_ 47 dcccd22ad2250fe35d90ec72808d6f98e3c628ccaa4c3ad1edb881003aae70dc
    wn9_data 289665 7195a47b8340e3abb42f12468fd049ad24ced9d55441699fbdb1f38c4a0e2894
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_nihaobaiying_tts2 | 你好百应 | zh
    _MODEL_INFO_ 45 82ebd4d49e92d305662608fb345435cc6a25746a7d4410bdc0e2d33e0a88a982
    wn9_data 289665 a61af128cd90c7913fe2a3d636227f7a83e345bbb42b8e66f5a672eac229d1a2
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_nihaodongdong_tts2 | 你好东东 | zh
    _MODEL_INFO_ 44 0e34e85e0a425a2de870e5458df0d49bcd7c249f297eb6f3035a8976c50c9a72
    wn9_data 289665 1c7e92364859e7e5e135c58802df5fcdf91221c93ea0d1e205b8f439f6b0a046
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_nihaomiaoban_tts2 | 你好喵伴 | zh
    _MODEL_INFO_ 44 1c8af6545113407cdba5579c7c408d557313671dd813dc5fb4787a6b47132c45
    wn9_data 289665 32a71ef6767dcc5cf0c4438078d82345e0d80c21a65f52feeb63ac77e6ae96fb
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_nihaoxiaoan_tts2 | 你好小安 | zh
    _MODEL_INFO_ 43 55201895d6fb50529cb8d65525850453f4ef47087be5f305a72802e412102516
    wn9_data 289665 532582a3444db8b3e6772b3f64f1b8caa7c9d50b7baee2578ade98df963f098e
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_nihaoxiaoxin_tts | 你好小鑫 | zh
    _MODEL_INFO_ 175 795ce53857c48f32106f80d3bcf834a8b2572d76fb4e5cf8e54d2f92c7a73f19
    wn9_data 289638 f248893a97fdcfef173598b99d25806dfdb0f38eb6884900a574a84a95bd5393
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_nihaoxiaoyi_tts2 | 你好小益 | zh
    _MODEL_INFO_ 45 cd51518accfaf94eceee13468224568b9384bfbb569dff83114b0962a971b182
    wn9_data 289665 636361c32e414da5b4dd97ccca777ea938ec9891451a916c46fac4e0cfa08ded
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_nihaoxiaozhi | 你好小智 · wn9_nihaoxiaozhi | zh
    _MODEL_INFO_ 42 950306e13a92e9da44560ce87f733f3124ed3c971af466e1b7aa59b51cc60a14
    wn9_data 289197 b2a6c82299cee7786ce1f7e229ec029592caa1b78d079217236d39eac94933fa
    wn9_index 1152 0b45c464e60ddfece31b7221d0464ecf11ce7b5e1d78a589cec48a08e60bcad9
wn9_nihaoxiaozhi_tts | 你好小智 | zh
    _MODEL_INFO_ 44 058c04f027862ab745c056b8c8d896396b1cf871e0a8098537610f1a0e16a108
    wn9_data 289638 3bd2998013971a5999ca024745bf282381ce93c1ac79468a674abfe3d91399d8
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_sophia_tts | Sophia | en
    _MODEL_INFO_ 171 c29156a2ffd89d1518a2ca9abeff1073d8db8adf14ba48ce543d226cdd6e102d
    wn9_data 289638 14ac3771e6731b616cbe45e2a3a94a205162b8baf3f00f803d59e8f95e7ceb16
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_sophia_tts_v1 | Sophia · wn9_sophia_tts_v1 | en
    _MODEL_INFO_ 170 d50e96d85404a8b6e2b4d701e581ce2569ce35921efc21e0821db6236d92faf1
    wn9_data 289638 6c87e5cc4d2bd95df5ff2e1658b64b3fc59e9fb162d53c582f76be5858f31eaf
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiao3feng1xiao3feng1_tts3 | 小峰小峰 | zh
    _MODEL_INFO_ 44 5d19bc654a2b49b59726a3b8e547354c6c9dc4696df1e796a1ae36df93c904d3
    wn9_data 289665 fc3567f5f24b4b0c88f21066020e03611e7c35498f5f57e6f958ea8c868326e9
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_xiao3jia1xiao3jia1_tts3 | 小珈小珈 | zh
    _MODEL_INFO_ 44 bfe58c645e94167ad9d4a2d1d479a00988596d506505d8da9f640eb7597ce100
    wn9_data 289665 2a6ad8736c0b503928de90c9faed84bd50ef8abd35a1c316641a428f3df8a5a3
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_xiaoaitongxue | 小爱同学 | zh
    _MODEL_INFO_ 41 0adda5f3f950d6033f15e822610a50d454a7210a4449b5b3d2f06639ef6998da
    wn9_data 289797 437d0211f2bfad8c77f677ce9896bbb754efb6cf783556264614ec3adeb67f11
    wn9_index 1152 50c9f2c4b66adfa57f32fd76e1c951c4f50d7eccebf22669a5d4bb3a4bec6f91
wn9_xiaobinxiaobin_tts | 小滨小滨 / 小冰小冰 | zh
    _MODEL_INFO_ 57 52e22743fb758fe7f8e283a3822f12f797a039557ef9a2a400aaa61ee84d26c8
    wn9_data 289638 95490c7d30d061a8b374b26ab15aee1e33017dc27e13c35f08301d901d503eeb
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaojianxiaojian_tts2 | 小箭小箭 | zh
    _MODEL_INFO_ 45 d3cfaedf22f109087f4143bf7c23f3e07c6a21f0195b2f4943e66bded2c86705
    wn9_data 289665 2cd2c30297d60295df637427594e3e27ac366729d637a4991adebfdd33a51ddb
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_xiaokangtongxue_tts2 | 小康同学 | zh
    _MODEL_INFO_ 45 72efb8d67b90977a76569d89bb4413900f4ce9cc548e60da5fe2a170ed75c89f
    wn9_data 289638 b634e856e47f3b335d021bca6e2e624098f95caae308060258faef3308ee8c93
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaolongxiaolong_tts | 小龙小龙 | zh
    _MODEL_INFO_ 44 7d45fe3b2839da8638b8ae04eea4de50cc0a4aded0e7c21d9c6fd42191ab97c2
    wn9_data 289638 f121717218ddbe3f1156dc2f35b0eda00f12cc8ca4f902955daa0930481b4ca7
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaoluxiaolu_tts2 | 小鹿小鹿 | zh
    _MODEL_INFO_ 44 b9cbec528131fef7b396ef3b0574b0242d5ddf4f6368c36d17ebc01ea8eb348c
    wn9_data 289665 54ec213e0ac8690eca6376712d18e1036ea49290100eeeb9c892b218dd771235
    wn9_index 1200 5810ee84beac8e73b4080a7b765e09900627ff973f2654811dd6a8557f0769b4
wn9_xiaomeitongxue_tts | 小美同学 | zh
    _MODEL_INFO_ 175 a6f662dbab256cd79d9c258765dd5ac7477c88e892df9c539ba4e081d6bad936
    wn9_data 289638 d3003892a6e340b005ac534bc3ad0f31968c2584cbbc45958dea3bc32c9788f3
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaomingtongxue_tts2 | 小明同学 | zh
    _MODEL_INFO_ 45 f1c2f767777149ea81cc30bf236f7a9c057272cb3c3e80f6cad52f5a9964da3e
    wn9_data 289638 cd89bbd1045a1fee7c4165e28d7605e87d341932283f9cba22f57b92ee74ec4a
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaosurou_tts2 | 小酥肉 | zh
    _MODEL_INFO_ 42 f364bc607e15962a160f436121129f97a5adefbb9ebc7c19f2c4b841b282a95b
    wn9_data 289638 1fa8f6c682bca72859869481ed6faa2d2ff96c2cca9c8e517858cef98d84b4e8
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaotexiaote_tts2 | 小特小特 | zh
    _MODEL_INFO_ 45 376aa921dfefe22c0b5f45e5ac920d540ced842b2682a798e0c549694fd77045
    wn9_data 289665 dfbf68baedd833ec0e682882cf5bbf07e3e0387bd72fd2c3847d88922b19fa33
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9_xiaoyaxiaoya_tts2 | 小鸭小鸭 | zh
    _MODEL_INFO_ 44 8bb56b3aac6715ef8c1083bced2cca6622f601f3d3fa61a2a92792cefdfae67b
    wn9_data 289638 ecf9e95951931671c8f1e8d48af69c434a82802242374dcbe29556b09f18e80d
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9_xiaoyutongxue_tts2 | 小宇同学 | zh
    _MODEL_INFO_ 44 f0e6e958c6817b4191f903cc6b39f5940c47f92c581f18dae433bdf3d5cf35e2
    wn9_data 289638 f4495bdd22352e959c8cfa0e4c5b3b1f382ea6af13616c004e660402193ed2f3
    wn9_index 1200 b463a5051d01bddc1f5723cddc8f3d5f11a6c750106694ca4aa0c8fdc235032c
wn9l_fr_bonjouresp_tts3 | Bonjour ESP | fr
    _MODEL_INFO_ 44 dc6db11e762e7e48e332694b27955585457d3558b17d3cf3a34914c8e6f067e1
    wn9_data 291201 5b97a3b5b7aa08ea31472b5bad3f5c268072b4b09e65cdc09dde35a1c4313ee8
    wn9_index 1200 134074ee1987de80678b4a820e03b456b92b75c83abfa9545f361f03d1a01539
wn9l_heygigi | Hey GiGi | en
    _MODEL_INFO_ 39 5e1f8b3595348db65594b6d340ba135e8d2b26a44083cc534808336d94d1d245
    wn9_data 291201 ab057129e85c167721848440991c3bed08d8559d72fefea1befbeb2dc1d4abd8
    wn9_index 1200 134074ee1987de80678b4a820e03b456b92b75c83abfa9545f361f03d1a01539
wn9l_histackchan_tts3 | Hi Stack Chan | en
    _MODEL_INFO_ 46 6fdf1352ff1887f86d678f5569756787a6a97454a0e42fcd86572f9392825ef7
    wn9_data 291201 bf982eb08ae778b53183ff4fe6f9ed5a4df5d4b5d21600ed4a879048bf1493fe
    wn9_index 1200 1eedc9ede6a99e279f7a0e77fb9f4a8f1fee366a21fa082d0a09515f9076df34
wn9l_ja_konnichihaesp_tts3 | こんにちは ESP | ja
    _MODEL_INFO_ 47 9f81c9f19f396f59cb808015af0d42272d4a45f9cc896e39bcc4df3113eca93e
    wn9_data 291201 5ef78e771b9ea14fc7b010c607e6fed5fe6fa85dcb6678ebe7ea3016425da1b7
    wn9_index 1200 134074ee1987de80678b4a820e03b456b92b75c83abfa9545f361f03d1a01539
wn9l_ni3hao3xing1bao3_tts3 | 你好星宝 | zh
    _MODEL_INFO_ 44 4674ef06a12972e01286df6cb758885f730c14dfe203e5725fa1ac6329fc74d8
    wn9_data 291201 8d29a64447a94138cd9e4425d0fc2f217664b49619c85a4d467bb3e4a4ca73c4
    wn9_index 1200 1eedc9ede6a99e279f7a0e77fb9f4a8f1fee366a21fa082d0a09515f9076df34
wn9l_nihaoxiaozhi_tts3 | 你好小智 · wn9l_nihaoxiaozhi_tts3 | zh
    _MODEL_INFO_ 48 50c1dc1ac607d91a82e72233e62385629bf091cfaa9110beb64e3ceaca833ae1
    wn9_data 291201 606dabf0babd28fcba75e0135d783d649b904596fefea0f64a5d83e4e3a4ef07
    wn9_index 1200 134074ee1987de80678b4a820e03b456b92b75c83abfa9545f361f03d1a01539
wn9l_xiaoaitongxue | 小爱同学 · wn9l_xiaoaitongxue | zh
    _MODEL_INFO_ 45 cfe83dec6cbbb948d954cb41a4bf2510125590b898763c12a381ed3e3f7733db
    wn9_data 289665 e2684f3a5a67f006344a664276060e94e5b280cad3bb59c86455980f47d4db6d
    wn9_index 1200 f13338e279d66ecbac972424a3be4c6184708e6019b9aae613243e83bc6230f9
wn9s_alexa | Alexa | en
    _MODEL_INFO_ 35 44463269e53a668f3d7590709708a4938a501982aca88e5cc262c81a3365c665
    wn9_data 289638 232af46bf553dd832733bb12d0cd4b4027c5b134693870ca6d32a61718c3c7ac
    wn9_index 1200 c5557ca5d1ec6943540a6abbb3ea235a693f4637369f92e873ff566b73a61cfd
wn9s_hiesp | Hi ESP | en
    _MODEL_INFO_ 38 a11245dd91f92c73ed3a57c3acd02e0d5c333b8b75c2f10aeda53d29cd8b4dd8
    wn9_data 124545 15eb816e94f73c95d122eee01808824ea93f06f1a03bd0d55a955b29a4294ce2
    wn9_index 1200 6260eb6cbab109db5823399c301059f9b805abca34db8c7b2b6c399820ada1d4
wn9s_hijason | Hi Jason | en
    _MODEL_INFO_ 42 051c11706b2365a49c389d572242349de62ee7b9133c8c1b6535d8f86f9ec1dc
    wn9_data 124545 6e1b19e88b13200f106ba0b4b6aeb23093eae8765047c061bc923014bf819d80
    wn9_index 1200 6260eb6cbab109db5823399c301059f9b805abca34db8c7b2b6c399820ada1d4
wn9s_hilexin | Hi 乐鑫 | zh
    _MODEL_INFO_ 41 f90b9f63f51148a709b170bcbddd2630cd7a6639918e418aa5081b3a6d540e7e
    wn9_data 124545 8aa1fc5e5dc0f313864081a9cb16406e6cbffedbd95390831c8d2d1263cf1896
    wn9_index 1200 6260eb6cbab109db5823399c301059f9b805abca34db8c7b2b6c399820ada1d4
wn9s_nihaoxiaozhi | 你好小智 | zh
    _MODEL_INFO_ 46 95a971d4b3230cf79a22045ba392b55443df2f6728636685ddc61d06db987121
    wn9_data 124545 0f4bb04e16afee0503c2842029f399c318e4ab07f46d883c93ed7fb443c918ab
    wn9_index 1200 6260eb6cbab109db5823399c301059f9b805abca34db8c7b2b6c399820ada1d4
"""

CATALOG: Final = _parse(_TABLE)
"""Every model offered, in esp-sr's folder order."""
