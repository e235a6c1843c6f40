// A corporate proxy auto-config file, as many companies publish one.
// Try it:  cornus-tui pac eval examples/corp.pac --url https://wiki.corp.example/ --host wiki.corp.example
//          cornus-tui route --egress-pac examples/corp.pac wiki.corp.example pypi.org 10.20.0.5:22

function FindProxyForURL(url, host) {
  host = host.toLowerCase();

  // Short names and the office LAN never go through a proxy.
  if (isPlainHostName(host) || dnsDomainIs(host, ".svc.cluster.local"))
    return "DIRECT";

  // Internal sites live on the corporate network: reach them from the developer's machine.
  if (dnsDomainIs(host, ".corp.example") || localHostOrDomainIs(host, "intranet.corp.example"))
    return "PROXY client";

  // Private ranges behind the VPN, matched on the destination's known address.
  var ip = dnsResolve(host);
  if (ip && (isInNet(ip, "10.0.0.0", "255.0.0.0") || isInNet(ip, "172.16.0.0", "255.240.0.0")))
    return "CLIENT";

  // The cloud metadata endpoint and known trackers are refused.
  if (host == "169.254.169.254" || shExpMatch(host, "*.tracker.example"))
    return "BLOCK";

  // Package mirrors go through the durable egress node.
  if (shExpMatch(host, "pypi.org") || shExpMatch(host, "*.pythonhosted.org"))
    return "PROXY gateway";

  // Streaming sites only outside office hours (UTC), through the corporate proxy.
  if (shExpMatch(host, "*.video.example"))
    return (weekdayRange("MON", "FRI") && timeRange(8, 18)) ? "DENY" : "PROXY proxy.corp.example:8080";

  // Everything else leaves from the cluster directly.
  return "DIRECT";
}
