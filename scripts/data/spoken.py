"""The two speech folders: FSDD (the recordings as published, some speakers) and speechocean762 (its Kaldi-style
split folders -> FLAC files, a TSV, a JSON-lines manifest and a speaker table).

FSDD: every `{digit}_{speaker}_{index}.wav` of the repository's recordings/ (anywhere in the download; a copy under
a folder named recordings/ wins over another), of the chosen speakers, copied byte for byte after a check that it is
a whole WAV file.

speechocean762: `<split>/wav.scp` (utterance -> WAV path relative to the corpus root, e.g.
WAVE/SPEAKER0001/000010011.WAV), `<split>/text` (utterance -> the sentence the speaker was asked to read, upper
case), `<split>/utt2spk` (utterance -> speaker; without it, the SPEAKERxxxx folder of the WAV path),
`<split>/spk2age` and `<split>/spk2gender` (speaker -> age in years, m/f). Each WAV is written as 16-bit FLAC at its
own rate (16 kHz in the corpus) to `<split>/<utterance>.flac`; `<split>.tsv` is `file<TAB>speaker<TAB>text` with a
header, the text as `text` has it; `<split>.jsonl` holds audio_filepath (relative to the folder), duration (seconds,
3 decimals, from the decoded samples), the text lower-cased, and the speaker; `speakers.tsv` is
`speaker<TAB>age<TAB>gender` for every speaker of the built splits. Rows are sorted by utterance, speakers by id.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
from argparse import Namespace
from pathlib import Path

from reading import Download, by_basename, check_wav

from zoo.errors import ZooError

FSDD_WHERE = "https://github.com/Jakobovski/free-spoken-digit-dataset (a git clone, or the page's Download ZIP)"
FSDD_NAME = re.compile(r"(\d)_([A-Za-z]+)_(\d+)\.wav")
FSDD_SPEAKERS = ("george", "jackson", "lucas", "nicolas")  # the four the speech_fsdd results were measured on

SO762_WHERE = ("https://www.openslr.org/101/ (speechocean762.tar.gz), or a clone of "
               "https://github.com/jimbozhang/speechocean762")
SO762_META = ("wav.scp", "text", "utt2spk", "spk2age", "spk2gender")
SO762_SPLITS = ("train", "test")
UTTERANCE = re.compile(r"[A-Za-z0-9_-]+")  # an utterance id becomes a file name: nothing that could leave the folder


def _audio_error(name: str, e: Exception, where: str) -> ZooError:
    return ZooError(f"{name} is not readable audio ({' '.join(str(e).split())[:80]}); download it again from {where}")


def build_fsdd(args: Namespace, download: Path, out: Path) -> str:
    import soundfile as sf

    _, found = Download(download, FSDD_WHERE).scan(lambda name: FSDD_NAME.fullmatch(posixpath.basename(name)))
    chosen = by_basename(list(found), FSDD_NAME.fullmatch, prefer_parent="recordings")
    if not chosen:
        raise ZooError(f"{download} holds no {{digit}}_{{speaker}}_{{index}}.wav files; give FSDD's repository "
                       f"(or its recordings/ folder) from {FSDD_WHERE}")
    present = sorted({FSDD_NAME.fullmatch(b).group(2) for b in chosen})
    wanted = present if args.speakers == "all" else [s.strip() for s in args.speakers.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in present]
    if unknown or not wanted:
        raise ZooError(f"--speakers: {', '.join(unknown) or '(none)'} not among the recordings' speakers "
                       f"{', '.join(present)}; name some of them, or all")
    out.mkdir(parents=True, exist_ok=True)
    kept = 0
    for base, name in sorted(chosen.items()):
        if FSDD_NAME.fullmatch(base).group(2) not in wanted:
            continue
        data = found[name]
        check_wav(data, name)
        try:
            sf.info(io.BytesIO(data))
        except RuntimeError as e:  # soundfile's LibsndfileError
            raise _audio_error(name, e, FSDD_WHERE) from None
        (out / base).write_bytes(data)
        kept += 1
    return f"fsdd: {kept} recordings of {len(wanted)} speakers ({', '.join(wanted)})"


def parse_kaldi(data: bytes, name: str) -> dict[str, str]:
    """A Kaldi table: `<key> <value>` per line (the value: the rest of the line, whitespace runs made one space)."""
    table = {}
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        parts = line.split(maxsplit=1)
        if not parts:
            continue
        if len(parts) < 2:
            raise ZooError(f"{name}:{lineno}: {line.strip()[:40]!r} has a key but no value; download the corpus "
                           f"again from {SO762_WHERE}")
        table[parts[0]] = " ".join(parts[1].split())
    return table


def split_tables(meta: dict[str, bytes], split: str, where: Path) -> tuple[str, dict[str, dict[str, str]]]:
    """(the corpus root inside the download, {file: table}) of one split's Kaldi folder."""
    folders = sorted({posixpath.dirname(n) for n in meta if posixpath.basename(posixpath.dirname(n)) == split
                      and posixpath.basename(n) == "wav.scp"})
    if len(folders) != 1:
        found = f"{len(folders)} of them ({', '.join(folders)})" if folders else "none"
        raise ZooError(f"{where} should hold one {split}/wav.scp, it holds {found}; give speechocean762's own "
                       f"folder or archive ({SO762_WHERE})")
    tables = {}
    for kind in SO762_META:
        name = posixpath.join(folders[0], kind)
        if name in meta:
            tables[kind] = parse_kaldi(meta[name], name)
        elif kind != "utt2spk":
            raise ZooError(f"{where} has no {name}; is it speechocean762? ({SO762_WHERE})")
    return posixpath.dirname(folders[0]), tables


def plan_split(split: str, root: str, tables: dict[str, dict[str, str]], names: set[str]) -> list[dict]:
    """One row per utterance: utterance, speaker, text, and the WAV's name in the download."""
    rows = []
    for utt, wav in sorted(tables["wav.scp"].items()):
        if not UTTERANCE.fullmatch(utt):
            raise ZooError(f"{split}/wav.scp: utterance id {utt!r} is not letters, digits, _ or -; is it "
                           f"speechocean762's wav.scp? ({SO762_WHERE})")
        member = posixpath.normpath(posixpath.join(root, wav))
        if wav.endswith("|") or wav.startswith("/") or member.startswith("..") or member not in names:
            raise ZooError(f"{split}/wav.scp: {utt}'s audio {wav!r} is not a file of the corpus; give the whole "
                           f"speechocean762 folder or archive, WAVE/ included ({SO762_WHERE})")
        folder = re.search(r"SPEAKER(\w+)/", wav)
        speaker = tables.get("utt2spk", {}).get(utt) or (folder.group(1) if folder else None)
        if speaker is None or utt not in tables["text"]:
            what = "no speaker (utt2spk, or a SPEAKERxxxx folder)" if speaker is None else "no line in text"
            raise ZooError(f"{split}: utterance {utt} has {what}; download the corpus again from {SO762_WHERE}")
        for kind in ("spk2age", "spk2gender"):
            if speaker not in tables[kind]:
                raise ZooError(f"{split}/{kind} has no line for speaker {speaker}; download the corpus again "
                               f"from {SO762_WHERE}")
        rows.append({"utt": utt, "speaker": speaker, "text": tables["text"][utt], "member": member,
                     "age": tables["spk2age"][speaker], "gender": tables["spk2gender"][speaker]})
    if not rows:
        raise ZooError(f"{split}/wav.scp lists no utterances; download the corpus again from {SO762_WHERE}")
    return rows


def build_so762(args: Namespace, download: Path, out: Path) -> str:
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if not splits or any(s not in SO762_SPLITS for s in splits) or len(set(splits)) < len(splits):
        raise ZooError(f"--splits {args.splits!r}: give train, test or train,test")
    source = Download(download, SO762_WHERE)
    names, meta = source.scan(lambda n: posixpath.basename(n) in SO762_META
                              and posixpath.basename(posixpath.dirname(n)) in splits)
    plans = {}
    for split in splits:
        root, tables = split_tables(meta, split, source.path)
        plans[split] = plan_split(split, root, tables, set(names))
    durations = write_audio(source, plans, out)
    speakers = {}
    for split, rows in plans.items():
        write_tables(out, split, rows, durations[split])
        speakers.update({r["speaker"]: (r["age"], r["gender"]) for r in rows})
    lines = [f"{s}\t{age}\t{gender}\n" for s, (age, gender) in sorted(speakers.items())]
    (out / "speakers.tsv").write_text("speaker\tage\tgender\n" + "".join(lines), encoding="utf-8")
    hours = sum(sum(d.values()) for d in durations.values()) / 3600
    counts = ", ".join(f"{split} {len(rows)}" for split, rows in plans.items())
    return f"so762: {counts} utterances, {len(speakers)} speakers, {hours:.2f} h"


def write_audio(source: Download, plans: dict[str, list[dict]], out: Path) -> dict[str, dict[str, float]]:
    """Each WAV once, streamed from the download, as `<split>/<utterance>.flac`; its duration per utterance."""
    import soundfile as sf

    targets: dict[str, list[tuple[str, str]]] = {}
    for split, rows in plans.items():
        (out / split).mkdir(parents=True, exist_ok=True)
        for r in rows:
            targets.setdefault(r["member"], []).append((split, r["utt"]))
    durations: dict[str, dict[str, float]] = {split: {} for split in plans}
    for member, data in source.stream(set(targets)):
        check_wav(data, member)
        try:
            samples, rate = sf.read(io.BytesIO(data), dtype="int16")
        except RuntimeError as e:  # soundfile's LibsndfileError
            raise _audio_error(member, e, SO762_WHERE) from None
        for split, utt in targets.pop(member):
            sf.write(str(out / split / f"{utt}.flac"), samples, rate, format="FLAC", subtype="PCM_16")
            durations[split][utt] = len(samples) / rate
    if targets:  # a name seen in the listing pass and gone in this one: the download changed meanwhile
        raise ZooError(f"{source.path} changed while it was read ({len(targets)} WAV files gone); try again")
    return durations


def write_tables(out: Path, split: str, rows: list[dict], durations: dict[str, float]) -> None:
    tsv = [f"{split}/{r['utt']}.flac\t{r['speaker']}\t{r['text']}\n" for r in rows]
    (out / f"{split}.tsv").write_text("file\tspeaker\ttext\n" + "".join(tsv), encoding="utf-8")
    manifest = [json.dumps({"audio_filepath": f"{split}/{r['utt']}.flac", "duration": round(durations[r["utt"]], 3),
                            "text": r["text"].lower(), "speaker": r["speaker"]}) + "\n" for r in rows]
    (out / f"{split}.jsonl").write_text("".join(manifest), encoding="utf-8")
