"""The report page: the sections in one HTML document with its CSS and script inline.

Nothing is fetched: no fonts, no scripts, no images from anywhere, so the
file opens offline and can be mailed or attached to a ticket. The script
only switches between the graph's module views (``data-open`` on a module
box or a tree entry shows that module's view); without it the root view and
every table still show.
"""
from __future__ import annotations

from html import escape

CSS = """
:root{--fg:#1d2433;--muted:#667085;--line:#d0d5dd;--bg:#fff;--panel:#f8f9fb;--accent:#2f6fde}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:14px 24px;border-bottom:1px solid var(--line);background:var(--panel)}
header h1{margin:0 0 4px;font-size:20px}
header .facts span{display:inline-block;margin-right:18px;color:var(--muted)}
header .facts b{color:var(--fg)}
nav.sections{padding:6px 24px;border-bottom:1px solid var(--line);position:sticky;top:0;background:#fff;z-index:2}
nav.sections a{margin-right:14px;color:var(--accent);text-decoration:none}
main{padding:8px 24px 40px}
section{margin:18px 0 28px}
h2{font-size:17px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:14px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--panel)}
td pre{margin:0;white-space:pre-wrap}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre.program{background:var(--panel);padding:10px;overflow:auto;max-height:600px;border:1px solid var(--line)}
.bar{position:relative;min-width:260px;height:18px;background:#eef2f8}
.bar span{position:absolute;left:0;top:0;bottom:0;background:#9db8ea}
.bar em{position:relative;font-style:normal;padding-left:4px;font-size:12px}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;font-weight:600}
.badge.ok{background:#d1fadf;color:#05603a}.badge.bad{background:#fee4e2;color:#b42318}
.note{color:var(--muted)}
.graphbox{display:flex;gap:16px;align-items:flex-start}
.tree{min-width:230px;max-width:300px;max-height:80vh;overflow:auto;font-size:12.5px;border:1px solid var(--line);
 padding:6px;background:var(--panel)}
.tree details{margin-left:10px}.tree>details{margin-left:0}
.tree summary{cursor:pointer;white-space:nowrap}
.tree a{color:var(--fg);text-decoration:none;cursor:pointer}.tree a.current{font-weight:700;color:var(--accent)}
.tree .leaf{margin-left:22px;white-space:nowrap}
.tree small{color:var(--muted)}
.views{flex:1;overflow:auto;max-height:80vh;border:1px solid var(--line)}
.crumbs{padding:6px 10px;border-bottom:1px solid var(--line);background:#fff;position:sticky;top:0;left:0}
.crumbs a{color:var(--accent);cursor:pointer}
svg.graph{display:block;margin:6px}
svg text{font:12px system-ui,sans-serif;text-anchor:middle;fill:#1d2433;pointer-events:none}
svg text.sub{font-size:11px;fill:#667085}
svg .edge{fill:none;stroke:#98a2b3;stroke-width:1.2}
svg .edge.back{stroke-dasharray:4 3}
svg .edge.sym{stroke:#d0d5dd;stroke-width:0.9;stroke-dasharray:2 2}
svg .arrowhead{fill:#98a2b3}
svg .unit rect{stroke:#667085;stroke-width:1;fill:#fff}
svg .module{cursor:pointer}
svg .module rect{fill:#eef4ff;stroke:#2f6fde}
svg .module rect.inner{fill:none;stroke:#9db8ea}
svg .module:hover rect,svg .module:focus rect{fill:#dbe7ff}
svg .port rect{fill:#fff;stroke-dasharray:3 2}
svg .op-compute rect{fill:#dbe7ff;stroke:#2f6fde}
svg .op-norm rect{fill:#d1fadf;stroke:#12b76a}
svg .op-act rect{fill:#fef0c7;stroke:#dc6803}
svg .op-shape rect{fill:#f4ebff;stroke:#9e77ed}
svg .op-control rect{fill:#fce7f6;stroke:#dd2590}
svg .op-assert rect{fill:#fee4e2;stroke:#d92d20}
svg .op-input rect{fill:#f2f4f7;stroke:#98a2b3}
svg .op-output rect{fill:#1d2433}svg .op-output text{fill:#fff}
.legend span{display:inline-block;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;border:1px solid #667085;margin-right:4px;vertical-align:-1px}
"""

SCRIPT = """
(function(){
  function show(key){
    var views=document.querySelectorAll('.view');
    for(var i=0;i<views.length;i++){views[i].hidden=(views[i].getAttribute('data-key')!==key);}
    var links=document.querySelectorAll('.tree a[data-open]');
    for(var j=0;j<links.length;j++){
      var here=links[j].getAttribute('data-open')===key;
      links[j].classList.toggle('current',here);
      for(var d=here?links[j].parentElement:null;d;d=d.parentElement){if(d.tagName==='DETAILS'){d.open=true;}}
    }
    var box=document.querySelector('.views'); if(box){box.scrollTop=0;box.scrollLeft=0;}
  }
  document.addEventListener('click',function(e){
    var t=e.target.closest?e.target.closest('[data-open]'):null;
    if(t){e.preventDefault();show(t.getAttribute('data-open'));}
  });
  document.addEventListener('keydown',function(e){
    if(e.key==='Enter'&&document.activeElement&&document.activeElement.hasAttribute('data-open')){
      show(document.activeElement.getAttribute('data-open'));}
  });
  var m=/^#view=(.*)$/.exec(window.location.hash||'');
  show(m?decodeURIComponent(m[1]):'');
})();
"""

LEGEND = ("<div class=\"legend\">" + "".join(
    f'<span><i style="background:{bg};border-color:{fg}"></i>{escape(name)}</span>' for name, bg, fg in (
        ("module call (click to open)", "#eef4ff", "#2f6fde"), ("matmul/conv/linear", "#dbe7ff", "#2f6fde"),
        ("normalization", "#d1fadf", "#12b76a"), ("activation", "#fef0c7", "#dc6803"),
        ("shape/view", "#f4ebff", "#9e77ed"), ("control flow", "#fce7f6", "#dd2590"),
        ("assertion", "#fee4e2", "#d92d20"), ("input/weight", "#f2f4f7", "#98a2b3"), ("other", "#fff", "#667085")))
    + "</div>")


def document(title: str, facts: list[tuple[str, str]], sections: list[tuple[str, str, str]]) -> str:
    """The whole page: ``sections`` are (anchor, heading, html body)."""
    fact_html = "".join(f"<span>{escape(k)}: <b>{escape(v)}</b></span>" for k, v in facts)
    nav = "".join(f'<a href="#{a}">{escape(h)}</a>' for a, h, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{escape(h)}</h2>{html}</section>' for a, h, html in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{escape(title)}</h1><div class=\"facts\">{fact_html}</div></header>"
            f"<nav class=\"sections\">{nav}</nav><main>{body}</main>"
            f"<script>{SCRIPT}</script></body></html>\n")
