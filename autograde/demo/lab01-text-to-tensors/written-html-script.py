"""Demo student: a written answer that pastes HTML, a script and an image with an onerror handler."""

DESCRIPTION = (
    "every code answer of chapter 1 is the reference; the written answer pastes a <script> tag, an <img> whose "
    "onerror runs code, a closing </div> and an HTML entity around a real sentence. It must read as the text it "
    "is everywhere a person sees it (course mark, formgrader's comment, the feedback page) and run nowhere: "
    "expected 23 of 23 and its 3 points awaiting a TA"
)
BASE = "solution"
ANSWERS = {
    "written_tokens_by_language": '''
<script>document.title = "written-html-script ran"; window.demoPwned = 1;</script>
<img src="x" onerror="window.demoPwned = 2">
</div></td></table><b>Hindi costs about 5 times the tokens of English</b> &amp; fewer requests fit.
<style>body { display: none }</style>
''',
}
EXPECTED = {"01_tokenization": {"auto": 23, "awaiting_ta": 3}}
