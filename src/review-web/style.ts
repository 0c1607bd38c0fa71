/** The page's only stylesheet, served from /static/review.css (the CSP allows styles from 'self' only). */
export const REVIEW_CSS = `
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; color: #1f2328; margin: 0; background: #f6f8fa; }
main { max-width: 760px; margin: 0 auto; padding: 16px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 14px; margin: 0 0 6px 0; }
.item { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 12px; margin: 10px 0; }
.item:target { border-color: #0969da; box-shadow: 0 0 0 2px #0969da44; }
dl { display: grid; grid-template-columns: 90px 1fr; gap: 2px 10px; margin: 6px 0; font-size: 14px; }
dt { color: #57606a; } dd { margin: 0; overflow-wrap: anywhere; }
.fact { font-weight: 600; }
.forms { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-end; margin-top: 8px; }
.forms form { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-end; }
.supersede { flex-basis: 100%; }
label { display: flex; flex-direction: column; font-size: 12px; color: #57606a; }
textarea, input { font: inherit; font-size: 14px; }
.supersede textarea { min-width: 320px; }
button { font: inherit; font-size: 14px; padding: 4px 12px; border: 1px solid #d0d7de; border-radius: 6px; background: #f6f8fa; cursor: pointer; }
button.danger { color: #cf222e; }
.muted { color: #57606a; font-size: 13px; }
.bad { color: #cf222e; } .notice { background: #fff8c5; padding: 8px; border-radius: 6px; }
.verdict { color: #9a6700; }
.chart { display: block; max-width: 100%; height: auto; background: #fff; border: 1px solid #d0d7de; margin: 6px 0; }
.legend .key { margin-right: 12px; font-size: 13px; }
.login { display: flex; flex-direction: column; gap: 10px; max-width: 320px; }
`;
