"""The report page: the sections in one HTML document with its CSS and script inline.

Nothing is fetched: no fonts, no scripts, no images from anywhere, so the
file opens offline and can be mailed or attached to a ticket. The script
(plain JavaScript, no library) moves around the graph: ``data-open`` on a
module box or a tree entry shows that module's view, ``data-expand`` switches
a view between its collapsed and expanded drawing, the toolbar zooms (also
Ctrl+wheel), fits, searches every view's boxes by name, operator or module
path, and shows the size/mask edges on request; dragging pans. Without the
script the root view and every table still show.
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
.tree{position:relative;min-width:230px;max-width:300px;max-height:calc(72vh + 40px);overflow:auto;
 font-size:12.5px;border:1px solid var(--line);
 padding:6px;background:var(--panel)}
.tree details{margin-left:10px}.tree>details{margin-left:0}
.tree summary{cursor:pointer;white-space:nowrap}
.tree a{color:var(--fg);text-decoration:none;cursor:pointer}.tree a.current{font-weight:700;color:var(--accent)}
.tree .leaf{margin-left:22px;white-space:nowrap}
.tree small{color:var(--muted)}
.views{flex:1;min-width:0;border:1px solid var(--line)}
.crumbs{padding:6px 10px;border-bottom:1px solid var(--line);background:#fff}
.crumbs a{color:var(--accent);cursor:pointer}
.crumbs button{margin-left:12px;font-size:12px}
.canvas{overflow:auto;max-height:72vh;cursor:grab;background:#fff}
.canvas.dragging{cursor:grabbing}
.toolbar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:6px 0;position:relative}
.toolbar input[type=search]{width:320px;padding:3px 6px;font:inherit}
.toolbar button{font:12px system-ui,sans-serif;padding:2px 8px;cursor:pointer}
.toolbar label{font-size:12.5px;color:var(--muted);margin-left:10px}
.toolbar .zoomlevel{font-size:12px;color:var(--muted);min-width:40px}
.results{position:absolute;top:30px;left:0;z-index:5;background:#fff;border:1px solid var(--line);
 max-height:320px;overflow:auto;width:520px;box-shadow:0 4px 12px rgba(0,0,0,.12);font-size:12.5px}
.results a{display:block;padding:3px 8px;cursor:pointer;color:var(--fg);text-decoration:none}
.results a:hover,.results a.sel{background:#eef4ff}
.results small{color:var(--muted)}
svg.graph{display:block;margin:6px}
svg .edge.aux,svg .auxpart{display:none}
svg .edge.aux{stroke:#f79009;stroke-width:0.9;stroke-dasharray:3 3}
.show-aux svg .edge.aux,.show-aux svg .auxpart{display:inline}
svg text.auxlabel{font-size:11px;fill:#b54708;text-anchor:start}
svg .unit.hit rect{stroke:#f04438;stroke-width:3}
svg .run rect.card{fill:#f5f8ff;stroke:#9db8ea}
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
  var box=document.querySelector('.views'); if(!box){return;}
  var zoom=document.querySelector('.zoomlevel');
  function current(){return document.querySelector('.view:not([hidden])');}
  function shown(view){  // the drawing of a view on screen (collapsed or expanded)
    var vs=view.querySelectorAll('.variant');
    for(var i=0;i<vs.length;i++){if(!vs[i].hidden){return vs[i].querySelector('svg');}}
    return view.querySelector('svg');
  }
  function dims(svg){  // the drawing's size: with the size/mask computations when they are shown
    var all=box.classList.contains('show-aux');
    return [+svg.getAttribute(all?'data-wall':'data-w'),+svg.getAttribute(all?'data-hall':'data-h')];
  }
  function resize(svg,s){
    var d=dims(svg);
    svg.setAttribute('viewBox','0 0 '+d[0]+' '+d[1]);
    svg.setAttribute('width',Math.round(d[0]*s)); svg.setAttribute('height',Math.round(d[1]*s));
  }
  function setScale(svg,s,cx,cy){
    s=Math.max(0.1,Math.min(4,s));
    var canvas=svg.closest('.canvas'), old=parseFloat(svg.getAttribute('data-scale')||'1');
    if(cx===undefined){cx=canvas.clientWidth/2;cy=canvas.clientHeight/2;}
    var gx=(canvas.scrollLeft+cx)/old, gy=(canvas.scrollTop+cy)/old;
    resize(svg,s); svg.setAttribute('data-scale',s);
    canvas.scrollLeft=gx*s-cx; canvas.scrollTop=gy*s-cy;
    if(zoom){zoom.textContent=Math.round(s*100)+'%';}
  }
  function fit(svg,whole){  // the width (or the whole drawing) in the window, never above 100%
    var canvas=svg.closest('.canvas'); if(!canvas){return;}
    var d=dims(svg), w=d[0]+12, h=d[1]+12;
    var s=Math.min(1,(canvas.clientWidth-4)/w);
    if(whole){s=Math.min(s,(window.innerHeight*0.72-4)/h);}
    setScale(svg,Math.max(whole?0.1:0.5,s),0,0); canvas.scrollLeft=0; canvas.scrollTop=0;
  }
  function show(key){
    if(!document.querySelector('.view[data-key="'+key.replace(/"/g,'')+'"]')){key='';}
    var views=document.querySelectorAll('.view');
    for(var i=0;i<views.length;i++){views[i].hidden=(views[i].getAttribute('data-key')!==key);}
    var links=document.querySelectorAll('.tree a[data-open]');
    for(var j=0;j<links.length;j++){
      var here=links[j].getAttribute('data-open')===key;
      links[j].classList.toggle('current',here);
      for(var d=here?links[j].parentElement:null;d;d=d.parentElement){if(d.tagName==='DETAILS'){d.open=true;}}
      if(here){var tree=links[j].closest('.tree');  // the entry in sight in the module tree
        if(tree){tree.scrollTop=links[j].offsetTop-tree.clientHeight/2;}}
    }
    var v=current(); if(v){var svg=shown(v); if(svg&&!svg.getAttribute('data-scale')){fit(svg,false);}}
  }
  function expand(view,on){
    var vs=view.querySelectorAll('.variant'); if(vs.length<2){return;}
    if(on===undefined){on=vs[1].hidden;}
    vs[0].hidden=on; vs[1].hidden=!on;
    var b=view.querySelector('button.expand');
    if(b){b.textContent=on?'collapse repeated blocks':'expand repeated blocks';}
    var svg=shown(view); if(svg&&!svg.getAttribute('data-scale')){fit(svg,false);}
  }
  function reveal(el){  // open the view holding a box, scroll it to the middle and mark it
    var view=el.closest('.view'); show(view.getAttribute('data-key'));
    var variant=el.closest('.variant');
    if(variant&&variant.hidden){expand(view,variant.classList.contains('expanded'));}
    if(el.closest('.auxpart')&&aux&&!aux.checked){showAux(true);}
    var old=document.querySelectorAll('.unit.hit'); for(var i=0;i<old.length;i++){old[i].classList.remove('hit');}
    el.classList.add('hit');
    var canvas=el.closest('.canvas'), r=el.getBoundingClientRect(), c=canvas.getBoundingClientRect();
    canvas.scrollLeft+=r.left-c.left-c.width/2+r.width/2; canvas.scrollTop+=r.top-c.top-c.height/2+r.height/2;
  }
  document.addEventListener('click',function(e){
    if(!e.target.closest){return;}
    var t=e.target.closest('[data-open]');
    if(t){e.preventDefault();show(t.getAttribute('data-open'));return;}
    var x=e.target.closest('[data-expand]');
    if(x){e.preventDefault();expand(x.closest('.view'));return;}
    var z=e.target.closest('[data-zoom]');
    if(z){var svg=shown(current()); if(!svg){return;} var k=z.getAttribute('data-zoom');
      if(k==='fit'){fit(svg,true);}else if(k==='1'){setScale(svg,1);}
      else{setScale(svg,parseFloat(svg.getAttribute('data-scale')||'1')*(k==='in'?1.25:0.8));}}
  });
  document.addEventListener('keydown',function(e){
    var a=document.activeElement;
    if(e.key==='Enter'&&a&&a.hasAttribute('data-open')){show(a.getAttribute('data-open'));}
    else if(e.key==='Enter'&&a&&a.hasAttribute('data-expand')){expand(a.closest('.view'));}
  });
  box.addEventListener('wheel',function(e){
    if(!(e.ctrlKey||e.metaKey)){return;}
    var svg=shown(current()); if(!svg){return;} e.preventDefault();
    var c=svg.closest('.canvas').getBoundingClientRect();
    setScale(svg,parseFloat(svg.getAttribute('data-scale')||'1')*(e.deltaY<0?1.15:0.87),e.clientX-c.left,e.clientY-c.top);
  },{passive:false});
  var drag=null;
  box.addEventListener('mousedown',function(e){
    var canvas=e.target.closest&&e.target.closest('.canvas');
    if(!canvas||e.button!==0||e.target.closest('.unit')){return;}
    drag={c:canvas,x:e.clientX,y:e.clientY,l:canvas.scrollLeft,t:canvas.scrollTop}; canvas.classList.add('dragging');
    e.preventDefault();
  });
  window.addEventListener('mousemove',function(e){
    if(drag){drag.c.scrollLeft=drag.l-(e.clientX-drag.x); drag.c.scrollTop=drag.t-(e.clientY-drag.y);}
  });
  window.addEventListener('mouseup',function(){if(drag){drag.c.classList.remove('dragging'); drag=null;}});
  var aux=document.getElementById('show-aux');
  function showAux(on){
    aux.checked=on; box.classList.toggle('show-aux',on);
    var svgs=box.querySelectorAll('svg.graph');
    for(var i=0;i<svgs.length;i++){resize(svgs[i],parseFloat(svgs[i].getAttribute('data-scale')||'1'));}
  }
  if(aux){aux.addEventListener('change',function(){showAux(aux.checked);});}
  var input=document.getElementById('graph-search'), results=document.querySelector('.results');
  var timer=null;
  function search(){
    var q=input.value.trim().toLowerCase(); results.innerHTML='';
    if(!q){results.hidden=true;return;}
    var words=q.split(/\\s+/), hits=document.querySelectorAll('.views [data-s]'), n=0, total=0;
    for(var i=0;i<hits.length;i++){
      var text=hits[i].getAttribute('data-s'), all=true;
      for(var w=0;w<words.length;w++){if(text.indexOf(words[w])<0){all=false;break;}}
      if(!all){continue;}
      total++; if(n>=200){continue;} n++;
      var el=hits[i], view=el.closest('.view'), a=document.createElement('a');
      var label=el.querySelector('text'), title=el.querySelector('title');
      a.textContent=(label?label.textContent:'')+'  ';
      var where=document.createElement('small');
      where.textContent=(title?title.textContent.split('\\n')[0]:'')+' — in '+
        (view.getAttribute('data-label')||'program');
      a.appendChild(where); a._el=el; results.appendChild(a);
    }
    if(total>n){var more=document.createElement('small'); more.textContent=' '+(total-n)+' more: type more of the name';
      results.appendChild(more);}
    if(!total){results.textContent='no box matches';}
    results.hidden=false;
  }
  if(input){
    input.addEventListener('input',function(){clearTimeout(timer); timer=setTimeout(search,120);});
    input.addEventListener('keydown',function(e){
      if(e.key==='Enter'){var f=results.querySelector('a'); if(f){reveal(f._el); results.hidden=true;}}
      if(e.key==='Escape'){results.hidden=true;}
    });
    results.addEventListener('click',function(e){
      var a=e.target.closest('a'); if(a&&a._el){reveal(a._el); results.hidden=true;}});
  }
  var m=/[#&]view=([^&]*)/.exec(window.location.hash||'');
  show(m?decodeURIComponent(m[1]):box.getAttribute('data-first')||'');
  if(/[#&]expand=1/.test(window.location.hash||'')){expand(current(),true);}
  if(/[#&]aux=1/.test(window.location.hash||'')&&aux){showAux(true);}
  var q=/[#&]find=([^&]*)/.exec(window.location.hash||'');
  if(q&&input){input.value=decodeURIComponent(q[1]); search();
    if(/[#&]go=1/.test(window.location.hash)){
      var f=results.querySelector('a'); if(f){reveal(f._el); results.hidden=true;}}}
})();
"""

TOOLBAR = ('<div class="toolbar"><input type="search" id="graph-search" placeholder="search nodes, operators, '
           'modules (e.g. h.11.attn, softmax)" aria-label="search the graph"/>'
           '<div class="results" hidden></div>'
           '<button type="button" data-zoom="out" title="zoom out (Ctrl+wheel)">−</button>'
           '<span class="zoomlevel">100%</span>'
           '<button type="button" data-zoom="in" title="zoom in (Ctrl+wheel)">+</button>'
           '<button type="button" data-zoom="fit" title="the whole view in the window">fit</button>'
           '<button type="button" data-zoom="1" title="actual size">1:1</button>'
           '<label><input type="checkbox" id="show-aux"/> show size/mask edges</label></div>')

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
