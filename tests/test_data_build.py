"""scripts/data/build.py: each publisher's download, as a tiny archive in its format built here, becomes the folder
its preset reads, and the zoo's own data modules accept it. Broken downloads and occupied out folders are one line
and leave nothing behind. No shared data, no network."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "data" / "build.py"
sys.path.insert(0, str(SCRIPT.parent))

import build  # noqa: E402  (scripts/data/build.py)
import flowers12  # noqa: E402

SPEAKERS = ("george", "jackson", "lucas", "nicolas", "theo")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = build.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def tar_gz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def zip_of(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG")
    return buf.getvalue()


def wav(seconds: float, rate: int, seed: int) -> bytes:
    buf = io.BytesIO()
    noise = np.random.default_rng(seed).integers(-3000, 3000, int(seconds * rate), dtype=np.int16)
    sf.write(buf, noise, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def left_alone(folder: Path) -> list[str]:
    """Everything in `folder`: a failed build must add nothing (no out folder, no temp folder)."""
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------------------------------- flowers12
@pytest.fixture
def flowers(tmp_path: Path) -> Path:
    """17flowers.tgz (jpg/image_NNNN.jpg, 4 photos of each of the 17 species) and datasplits.mat beside it, whose
    split 1 puts photos 1-2 of each species in trn1, 3 in val1 and 4 in tst1."""
    from scipy.io import savemat

    firsts = [80 * k + 1 for k in range(17)]
    files = {f"jpg/image_{n + i:04d}.jpg": jpeg(n + i) for n in firsts for i in range(4)}
    files["jpg/files.txt"] = b"\n".join(name.encode() for name in files) + b"\n"
    splits = {}
    for k in (1, 2, 3):
        splits[f"trn{k}"] = np.array([[n + i for n in firsts for i in (0, 1)]], dtype=float)
        splits[f"val{k}"] = np.array([[n + 2 for n in firsts]], dtype=float)
        splits[f"tst{k}"] = np.array([[n + 3 for n in firsts]], dtype=float)
    (tmp_path / "dl").mkdir()
    savemat(str(tmp_path / "dl" / "datasplits.mat"), splits)
    return tar_gz(tmp_path / "dl" / "17flowers.tgz", files)


def test_flowers12_from_17flowers_tgz_is_an_image_folder_the_vision_datamodule_reads(tmp_path, flowers, capsys):
    from PIL import Image

    from zoo.vision.data import ImageDataModule

    code, out, err = run(capsys, "flowers12", flowers, tmp_path / "flowers12", "--size", "32")
    assert code == 0, err
    root = tmp_path / "flowers12"
    assert sorted(p.name for p in (root / "train").iterdir()) == sorted(flowers12.KEPT)
    # the 17 species in blocks of 80: bluebell (4th) is 241-320, pansy (17th) 1281-1360; tst1 -> val/
    assert sorted(p.name for p in (root / "train" / "bluebell").iterdir()) == ["image_0241.jpg", "image_0242.jpg",
                                                                                 "image_0243.jpg"]
    assert [p.name for p in (root / "val" / "pansy").iterdir()] == ["image_1284.jpg"]
    assert not (root / "train" / "daffodil").exists() and not (root / "val" / "tulip").exists()
    with Image.open(root / "val" / "pansy" / "image_1284.jpg") as im:
        assert (im.size, im.mode, im.format) == ((32, 32), "RGB", "JPEG")
    assert "36 train / 12 val" in out
    dm = ImageDataModule(dataset="imagefolder", root=str(root), arch="resnet18", pretrained=False, image_size=32,
                         num_workers=0)
    dm.setup()
    assert dm.class_names == sorted(flowers12.KEPT)
    assert (len(dm.train_set), len(dm.val_set)) == (36, 12)


def test_flowers12_size_0_keeps_the_published_bytes_and_split_picks_the_mat_entry(tmp_path, flowers, capsys):
    code, _, err = run(capsys, "flowers12", flowers.parent, tmp_path / "out", "--size", "0", "--split", "2")
    assert code == 0, err
    assert (tmp_path / "out" / "val" / "iris" / "image_0404.jpg").read_bytes() == jpeg(404)


def test_a_truncated_or_foreign_archive_is_one_line_and_leaves_nothing(tmp_path, flowers, capsys):
    data = flowers.read_bytes()
    cut = tmp_path / "cut" / "17flowers.tgz"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) // 2])
    (cut.parent / "datasplits.mat").write_bytes((flowers.parent / "datasplits.mat").read_bytes())
    before = left_alone(tmp_path)
    code, out, err = run(capsys, "flowers12", cut, tmp_path / "built")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and "not a readable" in err
    assert "download it again from https://www.robots.ox.ac.uk/~vgg/data/flowers/17/" in err
    assert left_alone(tmp_path) == before  # neither the out folder nor its temp folder

    cut.write_text("<html>404 Not Found</html>\n")
    code, _, err = run(capsys, "flowers12", cut, tmp_path / "built")
    assert code == 2 and err.count("\n") == 1 and "not a readable zip or tar archive" in err
    (cut.parent / "datasplits.mat").write_bytes(b"MATLAB 5.0 MAT-file" + b"\0" * 20)
    code, _, err = run(capsys, "flowers12", flowers, tmp_path / "built", "--datasplits", cut.parent)
    assert code == 2 and err.count("\n") == 1 and "is not a readable MATLAB file" in err
    assert left_alone(tmp_path) == before


def test_an_out_folder_that_holds_files_is_refused_and_kept(tmp_path, flowers, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious\n")
    code, _, err = run(capsys, "flowers12", flowers, out)
    assert code == 2 and err == f"zoo: error: {out} already holds files; give a new or empty folder\n"
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "precious\n"
    (out / "notes.txt").rename(tmp_path / "notes.txt")  # an empty folder is fine
    assert run(capsys, "flowers12", flowers, out, "--size", "16")[0] == 0


def test_a_missing_package_is_one_line_naming_the_pip_command(tmp_path, flowers, capsys, monkeypatch):
    """scipy and soundfile come with the [speech] extra: a vision-only install builds flowers12 without a traceback."""
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    before = left_alone(tmp_path)
    code, _, err = run(capsys, "flowers12", flowers, tmp_path / "out")
    assert (code, err) == (2, "zoo: error: building flowers12 needs the Python package scipy; pip install scipy\n")
    assert left_alone(tmp_path) == before


def test_a_missing_download_says_where_the_publisher_offers_it(tmp_path, capsys):
    code, _, err = run(capsys, "fsdd", tmp_path / "nowhere", tmp_path / "out")
    assert code == 2 and err.count("\n") == 1
    assert "this script never downloads" in err and "github.com/Jakobovski/free-spoken-digit-dataset" in err


# ---------------------------------------------------------------------------------------------------- CR, SUBJ
CR_POS = b"i like the speak phone function a lot\n\nthe diaper champ is the BEST we found !\n" + b"".join(
    f"good thing number {i}\n".encode() for i in range(8))
CR_NEG = b"it does n't look like you can manage playlists\tfrom the nomad\n" + b"".join(
    f"bad thing number {i}\n".encode() for i in range(5))


def tsv(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines()]


def test_cr_from_senteval_zip_is_a_seeded_tsv_split_the_nlp_datamodule_reads(tmp_path, capsys):
    from zoo.nlp.data import TextDataModule

    download = zip_of(tmp_path / "datasmall_NB_ACL12.zip", {"data/customerr/custrev.pos": CR_POS,
                                                            "data/customerr/custrev.neg": CR_NEG})
    code, out, err = run(capsys, "cr", download, tmp_path / "cr")
    assert code == 0, err
    train, dev = tsv(tmp_path / "cr" / "train.tsv"), tsv(tmp_path / "cr" / "dev.tsv")
    # 16 non-empty lines: floor(16 * 0.8) = 12 train, 4 dev; whitespace collapsed, lower-cased, labels by file
    assert (len(train), len(dev)) == (12, 4) and "12 train / 4 dev" in out
    rows = set(train + dev)
    assert ("1", "the diaper champ is the best we found !") in rows
    assert ("0", "it does n't look like you can manage playlists from the nomad") in rows
    assert sum(label == "1" for label, _ in rows) == 10 and len(rows) == 16
    again = run(capsys, "cr", download, tmp_path / "cr_again")
    assert again[0] == 0 and tsv(tmp_path / "cr_again" / "dev.tsv") == dev  # the seed fixes the split
    assert run(capsys, "cr", download, tmp_path / "cr_seed1", "--seed", "1")[0] == 0
    assert tsv(tmp_path / "cr_seed1" / "dev.tsv") != dev
    dm = TextDataModule(tokenizer="sentence-transformers/all-MiniLM-L6-v2", dataset="files",
                        train_file=str(tmp_path / "cr" / "train.tsv"), val_file=str(tmp_path / "cr" / "dev.tsv"),
                        header=False, label_column=0, text_column=1, label_names=["0", "1"])
    assert (len(dm.rows["train"]), len(dm.rows["val"])) == (12, 4)


def test_subj_reads_senteval_names_or_pang_and_lees_own_archive(tmp_path, capsys):
    objective = "the film follows a caf\u00e9 owner in paris .\n".encode("latin-1") + b"a plot line .\n" * 4
    subjective = b"a gripping , funny movie .\n" * 5
    cornell = tar_gz(tmp_path / "rotten_imdb.tar.gz", {"plot.tok.gt9.5000": objective,
                                                       "quote.tok.gt9.5000": subjective})
    code, _, err = run(capsys, "subj", cornell, tmp_path / "subj")
    assert code == 0, err
    rows = tsv(tmp_path / "subj" / "train.tsv") + tsv(tmp_path / "subj" / "dev.tsv")
    assert ("1", "the film follows a caf\u00e9 owner in paris .") in rows and len(rows) == 10
    assert sorted(label for label, _ in rows) == ["0"] * 5 + ["1"] * 5

    senteval = tmp_path / "SentEval" / "data" / "downstream"
    for folder in (senteval / "SUBJ", senteval / "data_bin_classif" / "data" / "subj"):
        folder.mkdir(parents=True)
        (folder / "subj.objective").write_bytes(objective)
        (folder / "subj.subjective").write_bytes(subjective)
    code, _, err = run(capsys, "subj", tmp_path / "SentEval", tmp_path / "subj2")
    assert code == 0, err  # two copies: SentEval's SUBJ/ is the one taken


def test_cr_without_its_files_names_them(tmp_path, capsys):
    download = zip_of(tmp_path / "other.zip", {"data/customerr/custrev.pos": CR_POS})
    code, _, err = run(capsys, "cr", download, tmp_path / "cr")
    assert code == 2 and err.count("\n") == 1 and "holds no custrev.neg" in err and "SentEval" in err
    assert not (tmp_path / "cr").exists()


# ---------------------------------------------------------------------------------------------------- FSDD
def fsdd_files(prefix: str) -> dict[str, bytes]:
    """Digits 0 and 1 of five speakers, index 0 (FSDD's test split) and 5, 8 kHz mono 16-bit."""
    return {f"{prefix}recordings/{d}_{s}_{i}.wav": wav(0.3, 8000, 10 * d + i) for s in SPEAKERS for d in (0, 1)
            for i in (0, 5)}


def test_fsdd_from_the_repository_zip_is_the_folder_the_fsdd_datamodule_reads(tmp_path, capsys):
    from zoo.speech.fsdd import FSDDDataModule

    files = fsdd_files("free-spoken-digit-dataset-master/")
    download = zip_of(tmp_path / "free-spoken-digit-dataset-master.zip", files)
    code, out, err = run(capsys, "fsdd", download, tmp_path / "fsdd")
    assert code == 0, err
    built = sorted(p.name for p in (tmp_path / "fsdd").iterdir())
    assert len(built) == 16 and not any("theo" in name for name in built)  # the four speakers of the results
    assert (tmp_path / "fsdd" / "1_lucas_5.wav").read_bytes() == files[
        "free-spoken-digit-dataset-master/recordings/1_lucas_5.wav"]
    dm = FSDDDataModule(root=str(tmp_path / "fsdd"), holdout_speaker="lucas", sample_rate=8000)
    rows = dm.load_rows()
    assert {k: len(v) for k, v in rows.items()} == {"train": 6, "val": 6, "test": 4}

    assert run(capsys, "fsdd", download, tmp_path / "all", "--speakers", "all")[0] == 0
    assert len(list((tmp_path / "all").iterdir())) == 20
    code, _, err = run(capsys, "fsdd", download, tmp_path / "x", "--speakers", "george,yweweler")
    assert code == 2 and "yweweler not among the recordings' speakers george, jackson, lucas, nicolas, theo" in err


def test_a_truncated_recording_in_a_clone_is_one_line(tmp_path, capsys):
    clone = tmp_path / "free-spoken-digit-dataset"
    for name, data in fsdd_files("").items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_bytes(data[:-100] if name.endswith("0_george_5.wav") else data)
    before = left_alone(tmp_path)
    code, _, err = run(capsys, "fsdd", clone, tmp_path / "fsdd")
    assert code == 2 and err.count("\n") == 1 and "recordings/0_george_5.wav is truncated" in err
    assert left_alone(tmp_path) == before


# ---------------------------------------------------------------------------------------------------- speechocean762
SO762_TRAIN = {"000010011": ("0001", "WE CALL IT BEAR"), "000010035": ("0001", "ZERO THREE FIVE ONE"),
               "000480010": ("0048", "IT'S NOT FISH")}
SO762_TEST = {"000030012": ("0003", "MARK IS GOING TO SEE ELEPHANT")}


def kaldi_split(utts: dict[str, tuple[str, str]], ages: dict[str, str]) -> dict[str, bytes]:
    def table(pairs) -> bytes:
        return "".join(f"{k}\t{v}\n" for k, v in pairs).encode()

    speakers = sorted({s for s, _ in utts.values()})
    return {"wav.scp": table((u, f"WAVE/SPEAKER{s}/{u}.WAV") for u, (s, _) in utts.items()),
            "text": table((u, t) for u, (_, t) in utts.items()),
            "utt2spk": table((u, s) for u, (s, _) in utts.items()),
            "spk2age": table((s, ages[s]) for s in speakers),
            "spk2gender": table((s, "f" if s == "0048" else "m") for s in speakers)}


@pytest.fixture
def so762(tmp_path: Path) -> Path:
    """speechocean762.tar.gz as OpenSLR ships it: speechocean762/{train,test}/<Kaldi files>, WAVE/SPEAKERxxxx/*.WAV."""
    ages = {"0001": "6", "0048": "24", "0003": "9"}
    files = {}
    for split, utts in (("train", SO762_TRAIN), ("test", SO762_TEST)):
        files.update({f"speechocean762/{split}/{k}": v for k, v in kaldi_split(utts, ages).items()})
        for i, (utt, (speaker, _)) in enumerate(sorted(utts.items())):
            files[f"speechocean762/WAVE/SPEAKER{speaker}/{utt}.WAV"] = wav(0.5 + i / 8, 16000, i)
    files["speechocean762/README.md"] = b"speechocean762\n"
    return tar_gz(tmp_path / "speechocean762.tar.gz", files)


def test_so762_from_openslrs_archive_is_the_manifest_layout_the_speech_datamodule_reads(tmp_path, so762, capsys):
    from zoo.speech.data import ManifestDataModule

    code, out, err = run(capsys, "so762", so762, tmp_path / "so762")
    assert code == 0, err
    root = tmp_path / "so762"
    assert sorted(p.name for p in root.iterdir()) == ["speakers.tsv", "train", "train.jsonl", "train.tsv"]
    assert (root / "train.tsv").read_text().splitlines() == [
        "file\tspeaker\ttext", "train/000010011.flac\t0001\tWE CALL IT BEAR",
        "train/000010035.flac\t0001\tZERO THREE FIVE ONE", "train/000480010.flac\t0048\tIT'S NOT FISH"]
    assert (root / "speakers.tsv").read_text() == "speaker\tage\tgender\n0001\t6\tm\n0048\t24\tf\n"
    lines = [json.loads(line) for line in (root / "train.jsonl").read_text().splitlines()]
    assert lines[2] == {"audio_filepath": "train/000480010.flac", "duration": 0.75, "text": "it's not fish",
                        "speaker": "0048"}
    info = sf.info(str(root / "train" / "000480010.flac"))
    assert (info.format, info.subtype, info.samplerate, info.channels, info.frames) == ("FLAC", "PCM_16", 16000, 1,
                                                                                         12000)
    samples, _ = sf.read(str(root / "train" / "000480010.flac"), dtype="int16")
    assert np.array_equal(samples, sf.read(io.BytesIO(wav(0.75, 16000, 2)), dtype="int16")[0])  # lossless
    assert "train 3 utterances, 2 speakers" in out
    dm = ManifestDataModule(train_manifest=str(root / "train.jsonl"), val_manifest=str(root / "train.jsonl"),
                            sample_rate=16000)
    rows = dm.load_rows()
    assert [r.text for r in rows["train"]] == ["we call it bear", "zero three five one", "it's not fish"]


def test_so762_test_split_and_a_cut_archive(tmp_path, so762, capsys):
    code, _, err = run(capsys, "so762", so762, tmp_path / "both", "--splits", "train,test")
    assert code == 0, err
    assert (tmp_path / "both" / "test.tsv").read_text().splitlines()[1:] == [
        "test/000030012.flac\t0003\tMARK IS GOING TO SEE ELEPHANT"]
    assert (tmp_path / "both" / "speakers.tsv").read_text().splitlines()[1:] == ["0001\t6\tm", "0003\t9\tm",
                                                                                "0048\t24\tf"]
    data = so762.read_bytes()
    so762.write_bytes(data[: len(data) - 300])
    before = left_alone(tmp_path)
    code, _, err = run(capsys, "so762", so762, tmp_path / "cut")
    assert code == 2 and err.count("\n") == 1 and "speechocean762.tar.gz is not a readable" in err
    assert "https://www.openslr.org/101/" in err and left_alone(tmp_path) == before


def test_so762_wav_scp_pointing_outside_the_corpus_is_refused(tmp_path, capsys):
    """Every WAV is there, and one line of wav.scp names a file beside the corpus: it is not read."""
    corpus = tmp_path / "speechocean762"
    for k, v in kaldi_split(SO762_TRAIN, {"0001": "6", "0048": "24"}).items():
        (corpus / "train").mkdir(parents=True, exist_ok=True)
        (corpus / "train" / k).write_bytes(v.replace(b"WAVE/SPEAKER0048/", b"../"))
    for i, (utt, (speaker, _)) in enumerate(sorted(SO762_TRAIN.items())):
        (corpus / "WAVE" / f"SPEAKER{speaker}").mkdir(parents=True, exist_ok=True)
        (corpus / "WAVE" / f"SPEAKER{speaker}" / f"{utt}.WAV").write_bytes(wav(0.5, 16000, i))
    (tmp_path / "000480010.WAV").write_bytes(wav(0.5, 16000, 9))
    code, _, err = run(capsys, "so762", corpus, tmp_path / "out")
    assert code == 2 and err.count("\n") == 1
    assert "000480010's audio '../000480010.WAV' is not a file of the corpus" in err
    assert not (tmp_path / "out").exists()


def test_the_command_line_answers_in_one_line_and_help_names_the_publisher(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "so762", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "https://www.openslr.org/101/" in done.stdout
    out = tmp_path / "occupied"
    out.mkdir()
    (out / "x").write_text("x")
    done = subprocess.run([sys.executable, str(SCRIPT), "cr", str(tmp_path), str(out)], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.startswith("zoo: error: ")
    assert done.stderr.count("\n") == 1 and hashlib.sha256((out / "x").read_bytes()).hexdigest() == hashlib.sha256(
        b"x").hexdigest()
